// bm-wordcount: word counts over a text file, with the per-partition counts cached in a
// blockmgr cluster (examples/wordcount/wordcount_job.h), plus a reproducible corpus generator.
// Exit codes: 0 success; 1 runtime failure (one line on stderr); 2 usage error.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "blockmgr/client.h"
#include "blockmgr/storage_level.h"
#include "common/core/allocator.h"
#include "common/core/byte_size.h"
#include "common/net/master_addresses.h"
#include "common/zookeeper/zookeeper_session.h"
#include "examples/wordcount/corpus_generator.h"
#include "examples/wordcount/wordcount_job.h"

namespace bm::wordcount {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int Fail(const Status& status) {
  std::cerr << "bm-wordcount: " << status.ToString() << "\n";
  return kExitFailure;
}

int UsageError(const std::string& message) {
  std::cerr << "bm-wordcount: " << message << " (see bm-wordcount --help)\n";
  return kExitUsage;
}

int Generate(const std::string& output, uint64_t size, uint64_t seed) {
  Result<uint64_t> written = WriteCorpus(output, size, seed);
  if (!written.ok()) return Fail(written.status());
  std::cout << "generated " << *written << " bytes (" << FormatBytes(*written) << ", seed " << seed
            << ") into " << output << "\n";
  return 0;
}

int Run(const WordCountOptions& options, size_t top) {
  Result<WordCountRun> run = RunWordCount(options);
  if (!run.ok()) return Fail(run.status());
  const auto top_words = run->counts.Top(top);
  for (size_t i = 0; i < top_words.size(); ++i) {
    std::printf("%4zu  %-16s %12llu\n", i + 1, top_words[i].first.c_str(),
                static_cast<unsigned long long>(top_words[i].second));
  }
  std::printf("%s\n%s\n", ChecksumLine(run->counts).c_str(), SummaryLine(*run).c_str());
  return std::fflush(stdout) == 0 ? 0 : Fail(InternalError("writing to stdout failed"));
}

int Unpersist(const std::string& master, const WordCountOptions& keys, uint64_t rdd_id) {
  // Only the blocks' RDD id is needed, not the datasets that computed them: this is bmctl
  // rm-rdd, and the way to unpersist from outside the job.
  ClientOptions client_options{.master_address = master};
  client_options.zookeeper = keys.zookeeper;
  client_options.key_file = keys.key_file;
  client_options.master_key_file = keys.master_key_file;
  Client client(client_options);
  Result<uint64_t> removed = client.RemoveRdd(rdd_id);
  if (!removed.ok()) return Fail(removed.status());
  std::cout << "removed " << *removed << " cached partition(s) of RDD " << rdd_id << "\n";
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"Word counts over a text file, with partitions cached in blockmgr.", "bm-wordcount"};
  app.require_subcommand(1);
  app.footer("Exit codes: 0 success, 1 runtime failure, 2 usage error.");

  std::string output;
  std::string size_text = "64MiB";
  uint64_t seed = 42;
  CLI::App* generate = app.add_subcommand(
      "generate", "write a reproducible English-like text (Zipf-distributed words)");
  generate->add_option("--output", output, "the file to write")->required();
  generate->add_option("--size", size_text, "at least this many bytes, e.g. 64MiB (default)");
  generate->add_option("--seed", seed, "the same seed gives the same bytes (default 42)");

  WordCountOptions options;
  std::string level_text = std::string(StorageLevelName(options.level));
  size_t top = 10;
  CLI::App* run = app.add_subcommand(
      "run", "count the words of a file; ends with 'partitions=N computed=C hits=H seconds=S'");
  run->add_option("--master", options.master_address,
                  "the master's address, tcp://HOST:PORT, or every master's, comma-separated "
                  "(or give --zookeeper)");
  run->add_option("--input", options.input, "the text file")->required();
  run->add_option("--partitions", options.partitions, "partitions (default 16)")
      ->check(CLI::Range(1u, 1u << 20));
  run->add_option(
      "--level", level_text,
      "storage level of the cached counts: " + StorageLevelNames() + " (default MEMORY_AND_DISK)");
  run->add_option("--rdd-id", options.rdd_id,
                  "RDD id of the cached counts: the same across runs of one input, another for "
                  "another input (default 100)");
  run->add_option("--parallelism", options.parallelism,
                  "partitions fetched or computed at once (default: one per core)");
  run->add_option("--reducers", options.reducers,
                  "merge the partitions' counts through a shuffle of this many reducers (README "
                  "\"Shuffles\"); 0 (default): in this process")
      ->check(CLI::Range(0u, 1u << 16));
  run->add_option("--top", top, "how many of the most frequent words to print (default 10)");

  // Keys, for a cluster that runs with them: as bmctl takes them.
  app.add_option("--key", options.key_file, "this user's secret certificate (NAME.key_secret)")
      ->envname("BLOCKMGR_KEY");
  app.add_option("--master-key", options.master_key_file,
                 "the master's public certificate (MASTER.key)")
      ->envname("BLOCKMGR_MASTER_KEY");
  app.add_option("--zookeeper", options.zookeeper,
                 "HOST:PORT[,HOST:PORT...][/CHROOT] of the ZooKeeper the masters are elected "
                 "through, instead of --master")
      ->envname("BLOCKMGR_ZOOKEEPER");
  app.fallthrough();

  std::string unpersist_master;
  uint64_t unpersist_rdd = 100;
  CLI::App* unpersist =
      app.add_subcommand("unpersist", "remove every cached partition of the counts");
  unpersist->add_option("--master", unpersist_master,
                        "the master's address, tcp://HOST:PORT, or every master's, "
                        "comma-separated (or give --zookeeper)");
  unpersist->add_option("--rdd-id", unpersist_rdd, "RDD id of the cached counts (default 100)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    return UsageError(e.what());
  }

  // Every argument is checked before anything is read, written or sent.
  if (generate->parsed()) {
    Result<uint64_t> size = ParseByteSize(size_text);
    if (!size.ok()) return UsageError(size.status().message());
    return Generate(output, *size, seed);
  }
  // Where the master is: an address list, ZooKeeper, or both.
  auto check_masters = [&](const std::string& master) -> Status {
    if (master.empty() && options.zookeeper.empty()) {
      return InvalidArgumentError("--master or --zookeeper is required");
    }
    if (!master.empty()) BM_RETURN_IF_ERROR(MasterAddresses::ValidateConnectable(master));
    if (Status s = options.zookeeper.empty() ? Status::Ok()
                                             : ParseZooKeeperAddress(options.zookeeper).status();
        !s.ok()) {
      return InvalidArgumentError("--zookeeper: " + s.message());
    }
    return Status::Ok();
  };
  if (run->parsed()) {
    if (Status s = check_masters(options.master_address); !s.ok()) return UsageError(s.message());
    Result<StorageLevel> level = ParseStorageLevel(level_text);
    if (!level.ok()) return UsageError(level.status().message());
    options.level = *level;
    return Run(options, top);
  }
  if (Status s = check_masters(unpersist_master); !s.ok()) return UsageError(s.message());
  return Unpersist(unpersist_master, options, unpersist_rdd);
}

}  // namespace
}  // namespace bm::wordcount

int main(int argc, char** argv) {
  bm::TuneAllocatorForBlockBuffers();
  return bm::wordcount::Main(argc, argv);
}
