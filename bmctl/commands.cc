#include "bmctl/commands.h"

namespace bm {

std::vector<std::unique_ptr<BmctlCommand>> MakeBmctlCommands() {
  std::vector<std::unique_ptr<BmctlCommand>> commands;
  commands.push_back(MakeWorkersCommand());
  commands.push_back(MakeMastersCommand());
  commands.push_back(MakePutCommand());
  commands.push_back(MakeGetCommand());
  commands.push_back(MakeLocationsCommand());
  commands.push_back(MakeVerifyCommand());
  commands.push_back(MakeBlocksCommand());
  commands.push_back(MakeRddsCommand());
  commands.push_back(MakeRmCommand());
  commands.push_back(MakeRmRddCommand());
  commands.push_back(MakeDecommissionCommand());
  commands.push_back(MakeTenantsCommand());
  commands.push_back(MakeShareCommand(false));
  commands.push_back(MakeShareCommand(true));
  commands.push_back(MakeQuotaCommand());
  commands.push_back(MakeShufflesCommand());
  commands.push_back(MakeShuffleCommand());
  commands.push_back(MakeRmShuffleCommand());
  commands.push_back(MakeKeygenCommand());
  return commands;
}

}  // namespace bm
