// Fault injection against a real `alpha train` process (issue 15; docs/CHECKPOINTS.md, "Fault injection"):
//
// (a) SIGKILL before every file-system step of a checkpoint save (ALPHA_FAULT_KILL_AT=N, N = 1, 2, ...
//     until the save completes): each time the run directory still loads, and `alpha train --resume`
//     finishes with the losses, weights and optimizer state of an uninterrupted run, bit for bit;
// (b) NaN / Inf written into the gradients (ALPHA_FAULT_NAN_STEPS / ALPHA_FAULT_INF_STEPS): the step is
//     skipped (no update), logged, and training goes on; too many in a row stop the run with one clear
//     line and a checkpoint that resumes; with dynamic loss scaling an overflow halves the scale instead of
//     counting, until the scale reaches 1;
// (c) a full disk while checkpointing (a file-size limit, and a tiny tmpfs where user namespaces allow
//     one): one clear line naming the file, the previous checkpoint still current and intact, nothing
//     half-written left.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "alpha/core/error.h"
#include "alpha/core/file_io.h"
#include "alpha/train/checkpoint.h"
#include "core/file_test_util.h"
#include "support/checks.h"
#include "train/golden_run_util.h"

extern char** environ;

namespace alpha::train {
namespace {

namespace fs = std::filesystem;
using Names = std::vector<std::string>;

struct Child {
  int status = 0;
  std::string out, err;
  bool killed() const { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  std::string describe() const {
    std::ostringstream s;
    if (WIFSIGNALED(status)) s << "killed by signal " << WTERMSIG(status);
    else s << "exit code " << code();
    return s.str() + "\nstdout: " + out + "\nstderr: " + err;
  }
};

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Runs `argv` (argv[0] a path) with `env` ("NAME=value") added to this process's environment, stdout and
// stderr captured through files in `dir`. A file_size_limit > 0 sets RLIMIT_FSIZE in the child and ignores
// SIGXFSZ there, so that a write beyond the limit fails with EFBIG.
Child spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, const test::TempDir& dir,
            rlim_t file_size_limit = 0) {
  // One OpenMP thread: on a loaded machine the children's thread barriers would dominate their run time.
  std::vector<std::string> environment(env);
  environment.emplace_back("OMP_NUM_THREADS=1");
  for (char** e = environ; *e != nullptr; ++e)
    if (!std::string_view(*e).starts_with("ALPHA_FAULT_") && !std::string_view(*e).starts_with("OMP_NUM_THREADS="))
      environment.emplace_back(*e);
  auto pointers = [](std::vector<std::string>& strings) {
    std::vector<char*> p;
    for (auto& s : strings) p.push_back(s.data());
    p.push_back(nullptr);
    return p;
  };
  std::vector<std::string> args(argv);
  std::vector<char*> arg_ptrs = pointers(args), env_ptrs = pointers(environment);
  const std::string out_file = dir.file("child.stdout"), err_file = dir.file("child.stderr");
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {  // only async-signal-safe calls until execve
    if (file_size_limit > 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      rlimit limit{file_size_limit, file_size_limit};
      if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(126);
    }
    int out = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(126);
    ::execve(arg_ptrs[0], arg_ptrs.data(), env_ptrs.data());
    ::_exit(127);
  }
  Child child;
  while (::waitpid(pid, &child.status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("waitpid failed");
  child.out = read_file(out_file, "test");
  child.err = read_file(err_file, "test");
  return child;
}

Child alpha(const std::string& args, const test::TempDir& dir, const std::vector<std::string>& env = {},
            rlim_t file_size_limit = 0) {
  std::vector<std::string> argv = words(args);
  argv.insert(argv.begin(), ALPHA_BINARY);
  return spawn(argv, env, dir, file_size_limit);
}

// A one-layer `tiny` model on the built-in corpus, prepared once into DIR/data: a step takes milliseconds.
// The learning-rate schedule does not depend on --steps, so a run stopped early and resumed with more
// steps follows the same schedule as a straight one.
std::string prepare(const test::TempDir& dir) {
  Child p = alpha("prepare --builtin --vocab 512 --out " + dir.file("data"), dir);
  EXPECT_EQ(p.code(), 0) << p.describe();
  return " --config tiny --n-layer 1 --batch-size 2 --seq-len 16 --eval-every 0 --sample-tokens 0 --warmup-steps 1"
         " --lr-decay-steps 20 --data " + dir.file("data");
}

void expect_same_losses(const fs::path& run, const fs::path& reference) {
  std::vector<nlohmann::json> got = metrics_of(run), want = metrics_of(reference);
  ASSERT_EQ(got.size(), want.size()) << run;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i]["step"], want[i]["step"]);
    EXPECT_EQ(got[i]["loss"], want[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(got[i]["grad_norm"], want[i]["grad_norm"]) << "step " << i + 1;
    EXPECT_EQ(got[i]["skipped"], want[i]["skipped"]) << "step " << i + 1;
  }
}

// Weights and optimizer state of two checkpoints, bit for bit (the data position may differ).
void expect_same_weights(const fs::path& a, const fs::path& b) {
  CheckpointData ca = load_checkpoint(a), cb = load_checkpoint(b);
  ASSERT_EQ(ca.weights.size(), cb.weights.size());
  for (size_t i = 0; i < ca.weights.size(); ++i)
    EXPECT_TRUE(test::bit_equal(ca.weights[i].second, cb.weights[i].second)) << ca.weights[i].first;
  ASSERT_EQ(ca.optimizer.size(), cb.optimizer.size());
  for (size_t i = 0; i < ca.optimizer.size(); ++i)
    EXPECT_TRUE(test::bit_equal(ca.optimizer[i].second, cb.optimizer[i].second)) << ca.optimizer[i].first;
  EXPECT_EQ(ca.state.at("optimizer_step"), cb.state.at("optimizer_step"));
}

void copy_run(const fs::path& from, const fs::path& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

std::string one_line(const std::string& err) {
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  return err;
}

// Kills `alpha train --resume` from `base` before each file-system step of its checkpoint save in turn,
// resumes, and compares with `reference`. Returns the kinds of steps it killed before.
std::set<std::string> kill_at_every_step(const test::TempDir& dir, const fs::path& base, const fs::path& reference,
                                         const std::string& resume_args) {
  std::set<std::string> kinds;
  int64_t n = 1;
  for (;; ++n) {
    SCOPED_TRACE("ALPHA_FAULT_KILL_AT=" + std::to_string(n));
    const fs::path run = dir / "killed";
    copy_run(base, run);
    Child killed = alpha("train --resume --out " + run.string() + resume_args, dir,
                         {"ALPHA_FAULT_KILL_AT=" + std::to_string(n)});
    if (killed.code() == 0) break;  // the save has fewer steps than n: every one was tried
    if (!killed.killed()) {
      ADD_FAILURE() << killed.describe();
      break;
    }
    const std::string marker = "SIGKILL before checkpoint I/O step " + std::to_string(n) + ": ";
    size_t at = killed.err.find(marker);
    if (at == std::string::npos) {
      ADD_FAILURE() << killed.describe();
      break;
    }
    std::string what = killed.err.substr(at + marker.size());
    what.resize(what.find('\n'));
    kinds.insert(what.substr(0, what.find(" '")));
    SCOPED_TRACE("killed before " + what);
    try {
      // The run directory loads (the previous checkpoint, or the new one once `latest` moved), ...
      const int64_t step = load_checkpoint(run).state.at("step").get<int64_t>();
      EXPECT_TRUE(step == 2 || step == 3) << step;
      // ... and resuming finishes the run exactly like the uninterrupted one, leaving no debris.
      Child resumed = alpha("train --resume --out " + run.string() + resume_args, dir);
      EXPECT_EQ(resumed.code(), 0) << resumed.describe();
      if (resumed.code() == 0) {
        expect_same_losses(run, reference);
        expect_same_checkpoint(run, reference);
        Names left = test::list_dir(run / "checkpoints");
        EXPECT_TRUE(std::none_of(left.begin(), left.end(), [](const std::string& s) { return s.starts_with("."); }))
            << ::testing::PrintToString(left);
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(n, 40) << "a checkpoint save should take dozens of file-system steps";
  if (!::testing::Test::HasFailure())
    std::printf("[     INFO ] killed before each of the save's %lld file-system steps (%s), resumed bit for bit\n",
                static_cast<long long>(n - 1), ::testing::PrintToString(kinds).c_str());
  return kinds;
}

// (a) A run with a checkpoint at step 2 resumes to step 3; its save at step 3 (which also prunes step 2,
// keep_last 1) is killed before each of its file-system steps.
TEST(FaultInjection, KillDuringCheckpointSaveAtEveryStepThenResumeIsBitExact) {
  test::TempDir dir;
  const std::string common = prepare(dir) + " --save-every 2 --keep-last 1";
  ASSERT_EQ(alpha("train --out " + dir.file("reference") + " --steps 3" + common, dir).code(), 0);
  Child base = alpha("train --out " + dir.file("base") + " --steps 2" + common, dir);
  ASSERT_EQ(base.code(), 0) << base.describe();
  std::set<std::string> kinds = kill_at_every_step(dir, dir / "base", dir / "reference", " --steps 3" + common);
  for (const char* kind : {"mkdir", "create", "chmod", "write", "fsync", "close", "rename", "fsync directory", "remove"})
    EXPECT_TRUE(kinds.contains(kind)) << kind << " never killed; got " << ::testing::PrintToString(kinds);
}

// (a) The same where step 3's directory is already complete but `latest` still names step 2 (a crash
// between the two renames): the save replaces it through renameat2(RENAME_EXCHANGE).
TEST(FaultInjection, KillWhileReplacingAnExistingStepDirectoryThenResumeIsBitExact) {
  test::TempDir dir;
  const std::string common = prepare(dir) + " --save-every 2 --keep-last 0";
  ASSERT_EQ(alpha("train --out " + dir.file("reference") + " --steps 3" + common, dir).code(), 0);
  ASSERT_EQ(alpha("train --out " + dir.file("base") + " --steps 3" + common, dir).code(), 0);
  test::write_raw(dir / "base" / "checkpoints" / "latest", "step_00000002\n");
  std::set<std::string> kinds = kill_at_every_step(dir, dir / "base", dir / "reference", " --steps 3" + common);
  EXPECT_TRUE(kinds.contains("exchange")) << ::testing::PrintToString(kinds);
}

// (a) Leftovers of a crashed save are not checkpoints; resuming removes them.
TEST(FaultInjection, ResumeRemovesTheLeftoversOfACrashedSave) {
  test::TempDir dir;
  const std::string common = prepare(dir) + " --save-every 2 --keep-last 1";
  ASSERT_EQ(alpha("train --out " + dir.file("run") + " --steps 2" + common, dir).code(), 0);
  const fs::path ckpts = dir / "run" / "checkpoints";
  fs::create_directories(ckpts / ".tmp.step_00000004");
  test::write_raw(ckpts / ".tmp.step_00000004" / "model.safetensors", "partial");
  fs::create_directories(ckpts / ".deleting.step_00000001");
  test::write_raw(ckpts / ".latest.tmp.AbC123", "step_0000");
  test::write_raw(ckpts / "notes.txt", "a user's file is left alone");
  EXPECT_EQ(latest_checkpoint(dir / "run"), checkpoint_dir(dir / "run", 2));
  // --steps 2 again: nothing to train, nothing saved; the leftovers go anyway.
  Child resumed = alpha("train --resume --out " + dir.file("run") + " --steps 2" + common, dir);
  ASSERT_EQ(resumed.code(), 0) << resumed.describe();
  EXPECT_EQ(test::list_dir(ckpts), (Names{"latest", "notes.txt", "step_00000002"}));
}

// (b) NaN at step 2 and Inf at step 4: both steps are skipped (weights and optimizer state unchanged,
// "skipped" in metrics.jsonl and on stdout) and the run finishes with finite losses.
TEST(FaultInjection, NonFiniteGradientsSkipTheStepAndTrainingContinues) {
  test::TempDir dir;
  const std::string common = prepare(dir) + " --save-every 1 --keep-last 0";
  const fs::path run = dir / "run";
  Child child = alpha("train --out " + run.string() + " --steps 6" + common, dir,
                      {"ALPHA_FAULT_NAN_STEPS=2", "ALPHA_FAULT_INF_STEPS=4"});
  ASSERT_EQ(child.code(), 0) << child.describe();
  EXPECT_NE(child.out.find("step     2  skipped: non-finite gradients (loss "), std::string::npos) << child.out;
  EXPECT_NE(child.out.find("grad_norm nan), no update; 1 in a row, the run stops at 8"), std::string::npos)
      << child.out;
  EXPECT_NE(child.out.find("step     4  skipped: non-finite gradients"), std::string::npos) << child.out;
  EXPECT_NE(child.out.find("grad_norm inf), no update"), std::string::npos) << child.out;

  std::vector<nlohmann::json> m = metrics_of(run);
  ASSERT_EQ(m.size(), 6u);
  for (const auto& r : m) {
    const bool bad = r["step"] == 2 || r["step"] == 4;
    EXPECT_EQ(r["skipped"], bad) << r.dump();
    ASSERT_TRUE(r["loss"].is_number() && std::isfinite(r["loss"].get<double>())) << r.dump();
    EXPECT_EQ(r["grad_norm"].is_number(), !bad) << r.dump();  // NaN and Inf are written as null
  }
  // No update at a skipped step, updates on either side of it.
  expect_same_weights(checkpoint_dir(run, 1), checkpoint_dir(run, 2));
  expect_same_weights(checkpoint_dir(run, 3), checkpoint_dir(run, 4));
  EXPECT_FALSE(test::bit_equal(load_checkpoint(checkpoint_dir(run, 2)).weights[0].second,
                               load_checkpoint(checkpoint_dir(run, 3)).weights[0].second));
  EXPECT_EQ(load_checkpoint(run).state.at("optimizer_step"), 4);  // 6 steps, 2 skipped
}

// `alpha train` of 12 steps into `run` with `fault` in its environment, which must stop it (exit code 1).
Child train_until_it_stops(const test::TempDir& dir, const fs::path& run, const std::string& args,
                           const std::string& fault) {
  Child child = alpha("train --out " + run.string() + " --steps 12 " + args, dir, {fault});
  EXPECT_EQ(child.code(), 1) << child.describe();
  return child;
}

// (b) Non-finite gradients from step 3 on, max_nonfinite_steps 4: the run stops after step 6 with one
// line, having saved step 6 with step 2's weights; resuming (without the fault) trains on.
TEST(FaultInjection, RepeatedNonFiniteStepsStopWithAMessageAndAResumableCheckpoint) {
  test::TempDir dir;
  const std::string common = prepare(dir) + " --save-every 2 --keep-last 0";
  const fs::path run = dir / "run";
  Child child = train_until_it_stops(dir, run, "--max-nonfinite-steps 4" + common, "ALPHA_FAULT_NAN_STEPS=3-100");
  const std::string err = one_line(child.err);
  for (const std::string& fragment : std::vector<std::string>{"alpha: [train] steps 3 to 6: 4 steps in a row had a non-finite loss or gradient norm (max_nonfinite_steps 4)",
        "training stopped", "state of step 2, the last finite step, are saved in '" +
                                checkpoint_dir(run, 6).string() + "'", "--resume"})
    EXPECT_NE(err.find(fragment), std::string::npos) << "stderr '" << err << "' lacks '" << fragment << "'";
  EXPECT_EQ(latest_checkpoint(run), checkpoint_dir(run, 6));
  expect_same_weights(checkpoint_dir(run, 2), checkpoint_dir(run, 6));
  std::vector<nlohmann::json> m = metrics_of(run);
  ASSERT_EQ(m.size(), 6u);
  for (const auto& r : m) EXPECT_EQ(r["skipped"], r["step"] >= 3) << r.dump();

  Child resumed = alpha("train --resume --out " + run.string() + " --steps 8" + common, dir);
  ASSERT_EQ(resumed.code(), 0) << resumed.describe();
  m = metrics_of(run);
  ASSERT_EQ(m.size(), 8u);
  for (size_t i = 6; i < 8; ++i) {
    EXPECT_EQ(m[i]["skipped"], false) << m[i].dump();
    EXPECT_TRUE(std::isfinite(m[i]["grad_norm"].get<double>())) << m[i].dump();
  }
  EXPECT_EQ(load_checkpoint(run).state.at("optimizer_step"), 4);

  Child bad = alpha("train --out " + dir.file("r2") + " --max-nonfinite-steps=-1" + common, dir);
  EXPECT_EQ(bad.code(), 1);
  EXPECT_NE(one_line(bad.err).find("max_nonfinite_steps"), std::string::npos) << bad.err;
  Child typo = alpha("train --out " + dir.file("r3") + common, dir, {"ALPHA_FAULT_NAN_STEPS=3-x"});
  EXPECT_EQ(typo.code(), 1);
  EXPECT_NE(one_line(typo.err).find("ALPHA_FAULT_NAN_STEPS"), std::string::npos) << typo.err;
}

// (b) With dynamic loss scaling (initial scale 8), Inf gradients from step 3 on: steps 3, 4 and 5 are overflows
// the scaler answers (skipped, scale 8 -> 4 -> 2 -> 1, the run goes on); at the floor of 1 they count, and
// max_nonfinite_steps 2 stops the run after step 7, naming steps 3 to 7 and the three overflows.
TEST(FaultInjection, LossScalerHalvesItsScaleOnOverflowAndCountsOnlyAtItsFloor) {
  test::TempDir dir;
  const fs::path run = dir / "run";
  const std::string args = "--max-nonfinite-steps 2 --loss-scaling dynamic --loss-scale 8" + prepare(dir);
  Child child = train_until_it_stops(dir, run, args, "ALPHA_FAULT_INF_STEPS=3-100");
  for (const char* fragment : {"step     3  skipped: non-finite gradients at loss scale 8, no update; the scale is now 4",
                               "step     5  skipped: non-finite gradients at loss scale 2, no update; "
                               "the scale is now 1",
                               "step     6  skipped: non-finite gradients (loss "})
    EXPECT_NE(child.out.find(fragment), std::string::npos) << "stdout lacks '" << fragment << "':\n" << child.out;
  const std::string err = one_line(child.err);
  EXPECT_NE(err.find("[train] steps 3 to 7: 2 steps in a row had a non-finite loss or gradient norm "
                     "(max_nonfinite_steps 2; 3 more were overflows the loss scaler answered)"),
            std::string::npos)
      << err;
  std::vector<nlohmann::json> m = metrics_of(run);
  ASSERT_EQ(m.size(), 7u);
  const std::vector<double> scales{8, 8, 8, 4, 2, 1, 1};
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m[i]["loss_scale"].get<double>(), scales[i]) << m[i].dump();
    EXPECT_EQ(m[i]["skipped"], i >= 2) << m[i].dump();
  }
  EXPECT_EQ(load_checkpoint(run).state.at("loss_scaler").at("scale"), 1.0) << "the scale is checkpointed";
}

// After a failed save: one line naming the file and the previous checkpoint, `latest` on step 2, no
// debris, and a resume that ends like the uninterrupted reference.
void expect_clean_failure(const Child& child, const fs::path& run, const fs::path& checkpoints_after,
                          const std::string& errno_text) {
  EXPECT_EQ(child.code(), 1) << child.describe();
  const std::string err = one_line(child.err);
  EXPECT_NE(err.find(errno_text), std::string::npos) << err;
  EXPECT_NE(err.find(".tmp.step_00000003/"), std::string::npos) << err;
  EXPECT_NE(err.find("checkpoint step 3 was not saved, 'latest' still names step_00000002"), std::string::npos) << err;
  EXPECT_EQ(test::list_dir(checkpoints_after), (Names{"latest", "step_00000002"}));
  EXPECT_EQ(test::list_dir(checkpoints_after / "step_00000002"),
            (Names{"model.safetensors", "optimizer.safetensors", "state.json"}));
  EXPECT_EQ(load_checkpoint(checkpoints_after.parent_path()).state.at("step"), 2);
  (void)run;
}

// (c) A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes the save's writes fail with EFBIG, at the
// weights or at the optimizer state depending on the limit.
TEST(FaultInjection, FileSizeLimitWhileCheckpointingIsAClearErrorAndKeepsThePreviousCheckpoint) {
  test::TempDir dir;
  const std::string common = prepare(dir) + " --save-every 2 --keep-last 1";
  ASSERT_EQ(alpha("train --out " + dir.file("reference") + " --steps 3" + common, dir).code(), 0);
  ASSERT_EQ(alpha("train --out " + dir.file("base") + " --steps 2" + common, dir).code(), 0);
  const fs::path step2 = checkpoint_dir(dir / "base", 2);
  const rlim_t model = fs::file_size(step2 / "model.safetensors");
  const rlim_t optimizer = fs::file_size(step2 / "optimizer.safetensors");
  ASSERT_LT(model, optimizer);
  for (auto [limit, file] : {std::pair{model / 2, "model.safetensors"}, std::pair{model + 4096, "optimizer.safetensors"}}) {
    SCOPED_TRACE("file size limit " + std::to_string(limit));
    const fs::path run = dir / "run";
    copy_run(dir / "base", run);
    Child child = alpha("train --resume --out " + run.string() + " --steps 3" + common, dir, {}, limit);
    expect_clean_failure(child, run, run / "checkpoints", "File too large");
    EXPECT_NE(child.err.find(file), std::string::npos) << child.err;
    Child resumed = alpha("train --resume --out " + run.string() + " --steps 3" + common, dir);
    ASSERT_EQ(resumed.code(), 0) << resumed.describe();
    expect_same_losses(run, dir / "reference");
    expect_same_checkpoint(run, dir / "reference");
  }
}

// (c) A real full disk (ENOSPC): RUN/checkpoints on a small tmpfs, mounted in a user and mount namespace
// (`unshare -rm`, no root needed where the kernel allows unprivileged user namespaces; skipped otherwise).
// The free space is chosen so that the weights, then the optimizer state, run out of room.
TEST(FaultInjection, FullDiskWhileCheckpointingIsAClearErrorAndKeepsThePreviousCheckpoint) {
  test::TempDir dir;
  const char* unshare = "/usr/bin/unshare";
  if (!fs::exists(unshare) || spawn({unshare, "-rm", "/bin/sh", "-c", "mount -t tmpfs -o size=64k tmpfs " +
                                                                            dir.file("") + " && exit 0; exit 1"},
                                    {}, dir).code() != 0)
    GTEST_SKIP() << "cannot mount a tmpfs in a user namespace here (unshare -rm)";
  const std::string common = prepare(dir) + " --save-every 2 --keep-last 1";
  ASSERT_EQ(alpha("train --out " + dir.file("reference") + " --steps 3" + common, dir).code(), 0);
  ASSERT_EQ(alpha("train --out " + dir.file("base") + " --steps 2" + common, dir).code(), 0);
  const fs::path step2 = checkpoint_dir(dir / "base", 2);
  auto pages = [](uint64_t bytes) { return (bytes + 4095) / 4096 * 4096; };
  const uint64_t model = pages(fs::file_size(step2 / "model.safetensors"));
  const uint64_t optimizer = pages(fs::file_size(step2 / "optimizer.safetensors"));
  const uint64_t used = model + optimizer + pages(fs::file_size(step2 / "state.json")) + 4096;  // + latest
  for (auto [free, file] : {std::pair{model / 2, "model.safetensors"}, std::pair{model + optimizer / 2, "optimizer.safetensors"}}) {
    SCOPED_TRACE("free bytes " + std::to_string(free));
    const fs::path run = dir / "run", after = dir / "after";
    copy_run(dir / "base", run);
    fs::remove_all(after);
    fs::create_directories(after / "checkpoints");
    // Inside the namespace: the tmpfs goes over RUN/checkpoints (holding a copy of its contents); the
    // state after the failed save is copied out before the namespace, and the mount, go away.
    const std::string ckpts = (run / "checkpoints").string(), saved = dir.file("saved");
    const std::string script = "set -e; rm -rf " + saved + "; cp -a " + ckpts + " " + saved +
                               "; mount -t tmpfs -o size=" + std::to_string(used + free) + " tmpfs " + ckpts +
                               "; cp -a " + saved + "/. " + ckpts + "/; set +e; " + ALPHA_BINARY +
                               " train --resume --out " + run.string() + " --steps 3" + common + "; rc=$?; cp -a " +
                               ckpts + "/. " + (after / "checkpoints").string() + "/; exit $rc";
    Child child = spawn({unshare, "-rm", "/bin/sh", "-c", script}, {}, dir);
    expect_clean_failure(child, run, after / "checkpoints", "No space left on device");
    EXPECT_NE(child.err.find(file), std::string::npos) << child.err;
  }
}

}  // namespace
}  // namespace alpha::train
