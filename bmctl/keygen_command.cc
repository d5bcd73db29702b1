// bmctl keygen NAME --role ROLE --out DIR: a CurveZMQ keypair for a cluster with keys. Needs no
// master.

#include <iostream>
#include <memory>
#include <string>

#include "bmctl/commands.h"
#include "common/security/curve_keys.h"

namespace bm {
namespace {

class KeygenCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* keygen = app.add_subcommand(
        "keygen",
        "make a keypair: DIR/NAME.key (public, for the allow-lists) and DIR/NAME.key_secret "
        "(mode 0600, for --key); for a worker, NAME is its worker id");
    keygen->add_option("NAME", name_, "the key's name")->required();
    keygen->add_option("--role", role_name_, "master, worker, client or admin")
        ->required()
        ->check(CLI::IsMember({"master", "worker", "client", "admin"}));
    keygen->add_option("--out", dir_, "the folder to write the files to")->required();
    return keygen;
  }

  Status Validate() override {
    BM_ASSIGN_OR_RETURN(role_, ParseKeyRole(role_name_));
    return Status::Ok();
  }

  bool NeedsMaster() const override { return false; }

  int Run(Client&, const OutputOptions&) override { return RunLocally(); }

  int RunLocally() override {
    Status made = GenerateCertificate(dir_, name_, role_);
    if (!made.ok()) return Fail(made);
    std::cout << "wrote " << dir_ << "/" << name_ << ".key and " << dir_ << "/" << name_
              << ".key_secret (" << role_name_ << ")\n";
    return kExitSuccess;
  }

 private:
  // Parsed by CLI11.
  std::string name_;
  std::string role_name_;
  std::string dir_;
  KeyRole role_ = KeyRole::kClient;  // set by Validate
};

}  // namespace

std::unique_ptr<BmctlCommand> MakeKeygenCommand() { return std::make_unique<KeygenCommand>(); }

}  // namespace bm
