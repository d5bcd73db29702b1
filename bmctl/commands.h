#pragma once

// bmctl's commands. Each is a BmctlCommand (bmctl/command.h) defined in the file named
// for its kind; MakeBmctlCommands lists them all.

#include <memory>
#include <vector>

#include "bmctl/command.h"

namespace bm {

// Every command, in the order `bmctl --help` lists them. A new command is added here.
std::vector<std::unique_ptr<BmctlCommand>> MakeBmctlCommands();

// bmctl_cluster_commands.cc
std::unique_ptr<BmctlCommand> MakeWorkersCommand();
std::unique_ptr<BmctlCommand> MakeMastersCommand();
std::unique_ptr<BmctlCommand> MakeRddsCommand();
std::unique_ptr<BmctlCommand> MakeDecommissionCommand();
// bmctl_transfer_commands.cc
std::unique_ptr<BmctlCommand> MakePutCommand();
std::unique_ptr<BmctlCommand> MakeGetCommand();
// bmctl_block_commands.cc
std::unique_ptr<BmctlCommand> MakeLocationsCommand();
std::unique_ptr<BmctlCommand> MakeVerifyCommand();
std::unique_ptr<BmctlCommand> MakeBlocksCommand();
std::unique_ptr<BmctlCommand> MakeRmCommand();
std::unique_ptr<BmctlCommand> MakeRmRddCommand();
// bmctl_tenant_commands.cc
std::unique_ptr<BmctlCommand> MakeShareCommand(bool unshare);
std::unique_ptr<BmctlCommand> MakeQuotaCommand();
std::unique_ptr<BmctlCommand> MakeTenantsCommand();
// bmctl_shuffle_commands.cc
std::unique_ptr<BmctlCommand> MakeShufflesCommand();
std::unique_ptr<BmctlCommand> MakeShuffleCommand();
std::unique_ptr<BmctlCommand> MakeRmShuffleCommand();
// bmctl_keygen_command.cc
std::unique_ptr<BmctlCommand> MakeKeygenCommand();

}  // namespace bm
