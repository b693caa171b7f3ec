// The `swarmflow` command: the stock command line (swarmflow/cli.hpp) with
// the built-in packs and whatever plugins it is given.

#include <swarmflow/cli.hpp>

int main(int argc, char** argv) { return swarmflow::cli_main(argc, argv); }
