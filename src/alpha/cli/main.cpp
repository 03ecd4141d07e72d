// The `alpha` command line: subcommands for the tokenizer, data preparation, training and sampling.
// Errors from the engine are typed; they are printed as one line and the exit code is 1. Any other
// exception is a bug (a reader that let a library's exception through, say): it is printed as one line
// too, with exit code 3, rather than aborting with a core dump (docs/SECURITY.md). One that escapes where none
// may (std::terminate) is named on one line before the abort.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <exception>
#include <iostream>

#include "alpha/cli/commands.h"
#include "alpha/core/error.h"

namespace {

// An exception that escapes where none may (a destructor, a noexcept function) ends the process through
// std::terminate: say what it was, on one line, before the abort, so that a crashed worker names its cause.
[[noreturn]] void report_and_abort() {
  try {
    if (std::exception_ptr current = std::current_exception()) std::rethrow_exception(current);
    std::cerr << "alpha: internal error: std::terminate called with no exception in flight\n";
  } catch (const std::exception& e) {
    std::cerr << "alpha: internal error: an exception escaped where none may (std::terminate): " << e.what() << "\n";
  } catch (...) {
    std::cerr << "alpha: internal error: a non-standard exception escaped where none may (std::terminate)\n";
  }
  std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  std::set_terminate(report_and_abort);
  CLI::App app{"Alpha: train transformer language models on the CPU or a CUDA GPU"};
  app.set_version_flag("--version", std::string("alpha ") + ALPHA_VERSION);
  app.require_subcommand(0, 1);
  alpha::cli::add_tokenizer_command(app);
  alpha::cli::add_prepare_command(app);
  alpha::cli::add_train_commands(app);
  alpha::cli::add_check_command(app);
  alpha::cli::add_dashboard_commands(app);
  try {
    app.parse(argc, argv);  // runs the chosen subcommand's callback
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const alpha::Error& e) {
    std::cerr << "alpha: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "alpha: internal error (not a typed error, please report it): " << e.what() << "\n";
    return 3;
  }
  if (app.get_subcommands().empty()) std::cout << app.help();
  return 0;
}
