// bmctl tenants, share, unshare and quota: who owns what, and how much each tenant may keep
// (docs/security.md "Tenants, shares and quotas").

#include <iostream>
#include <memory>
#include <string>

#include "bmctl/commands.h"
#include "bmctl/output.h"
#include "common/core/byte_size.h"
#include "common/security/tenant.h"

namespace bm {
namespace {

// bmctl tenants: every tenant's bytes, quotas and datasets (a client key sees its own).
class TenantsCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    return app.add_subcommand("tenants", "tenants: bytes stored, quotas, datasets owned");
  }

  Status Validate() override { return Status::Ok(); }

  int Run(Client& client, const OutputOptions& output) override {
    Result<std::vector<TenantInfo>> list = client.Tenants();
    if (!list.ok()) return Fail(list.status());
    std::cout << (output.json ? TenantsToJson(*list).dump(2) + "\n" : TenantsTable(*list));
    return FlushStdout();
  }
};

// bmctl share DATASET TENANT / bmctl unshare DATASET TENANT.
class ShareCommand : public BmctlCommand {
 public:
  explicit ShareCommand(bool unshare) : unshare_(unshare) {}

  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* share = app.add_subcommand(
        unshare_ ? "unshare" : "share",
        unshare_ ? "stop sharing a dataset with a tenant"
                 : "let another tenant read a dataset (read-only): its owner's or an admin key");
    share->add_option("DATASET", dataset_, "an RDD id (42 or rdd_42) or a non-RDD block id")
        ->required();
    share->add_option("TENANT", tenant_, "the tenant")->required();
    return share;
  }

  Status Validate() override {
    BM_ASSIGN_OR_RETURN(dataset_, ParseDataset(dataset_));
    if (!IsValidTenantName(tenant_)) {
      return InvalidArgumentError("'" + tenant_ + "' is not a tenant name");
    }
    return Status::Ok();
  }

  int Run(Client& client, const OutputOptions& output) override {
    if (Status shared = client.Share(dataset_, tenant_, unshare_); !shared.ok()) {
      return Fail(shared);
    }
    if (!output.json) {
      std::cout << dataset_ << (unshare_ ? " is no longer shared with " : " is shared with ")
                << tenant_ << (unshare_ ? "\n" : " (read-only)\n");
    }
    return FlushStdout();
  }

 private:
  const bool unshare_;
  std::string dataset_;  // parsed by CLI11
  std::string tenant_;
};

// bmctl quota set TENANT [--memory SIZE] [--disk SIZE] / bmctl quota rm TENANT.
class QuotaCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* quota = app.add_subcommand("quota", "a tenant's byte quotas (admin keys)");
    quota->require_subcommand(1);
    set_ = quota->add_subcommand("set", "set a tenant's quotas across the cluster");
    set_->add_option("TENANT", tenant_, "the tenant")->required();
    set_->add_option("--memory", memory_, "bytes it may keep in memory, every copy counted");
    set_->add_option("--disk", disk_, "bytes it may keep on disk, every copy counted");
    rm_ = quota->add_subcommand("rm", "remove a tenant's quotas");
    rm_->add_option("TENANT", tenant_, "the tenant")->required();
    return quota;
  }

  Status Validate() override {
    if (!IsValidTenantName(tenant_)) {
      return InvalidArgumentError("'" + tenant_ + "' is not a tenant name");
    }
    if (set_->parsed()) {
      if (memory_.empty() && disk_.empty()) {
        return InvalidArgumentError("quota set needs --memory, --disk or both");
      }
      if (!memory_.empty()) {
        BM_ASSIGN_OR_RETURN(memory_bytes_, ParseByteSize(memory_));
      }
      if (!disk_.empty()) {
        BM_ASSIGN_OR_RETURN(disk_bytes_, ParseByteSize(disk_));
      }
    }
    return Status::Ok();
  }

  int Run(Client& client, const OutputOptions& output) override {
    const Status done = rm_->parsed() ? client.RemoveQuota(tenant_)
                                      : client.SetQuota(tenant_, memory_bytes_, disk_bytes_);
    if (!done.ok()) return Fail(done);
    if (!output.json) {
      if (rm_->parsed()) {
        std::cout << "tenant " << tenant_ << " has no quota\n";
      } else {
        auto limit = [](uint64_t bytes) {
          return bytes == 0 ? std::string("no limit") : FormatBytes(bytes);
        };
        std::cout << "tenant " << tenant_ << ": memory " << limit(memory_bytes_) << ", disk "
                  << limit(disk_bytes_) << "\n";
      }
    }
    return FlushStdout();
  }

 private:
  CLI::App* set_ = nullptr;  // owned by the app
  CLI::App* rm_ = nullptr;
  std::string tenant_;  // parsed by CLI11
  std::string memory_;
  std::string disk_;
  uint64_t memory_bytes_ = 0;
  uint64_t disk_bytes_ = 0;
};

}  // namespace

std::unique_ptr<BmctlCommand> MakeTenantsCommand() { return std::make_unique<TenantsCommand>(); }
std::unique_ptr<BmctlCommand> MakeShareCommand(bool unshare) {
  return std::make_unique<ShareCommand>(unshare);
}
std::unique_ptr<BmctlCommand> MakeQuotaCommand() { return std::make_unique<QuotaCommand>(); }

}  // namespace bm
