// The `alpha` subcommands. Each add_<name>_command registers one subcommand whose callback does the
// work; main() calls them all and turns alpha::Error into one line on stderr and exit code 1.
#pragma once

namespace CLI {
class App;
}

namespace alpha::cli {

void add_tokenizer_command(CLI::App& app);  // alpha tokenizer train
void add_prepare_command(CLI::App& app);    // alpha prepare
void add_train_commands(CLI::App& app);     // alpha train, alpha sample, alpha logits
void add_check_command(CLI::App& app);      // alpha check kernels
void add_dashboard_commands(CLI::App& app); // alpha dashboard, alpha report

}  // namespace alpha::cli
