// Client-side measurements of the key-value peers, Redis (hiredis) and memcached
// (libmemcached), with the same value sizes and loops as blockmgr's.

#include <hiredis/hiredis.h>
#include <libmemcached/memcached.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "bench/tasks.h"

namespace bm::bench {
namespace {

std::string Key(int key) { return "bench:" + std::to_string(key); }

struct RedisFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisConnection = std::unique_ptr<redisContext, RedisFree>;
using RedisReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

Result<RedisConnection> ConnectRedis(int port) {
  RedisConnection c(redisConnect("127.0.0.1", port));
  if (!c || c->err) {
    return UnavailableError("cannot connect to redis: " + std::string(c ? c->errstr : "oom"));
  }
  return c;
}

// Checks one reply: an error or a broken connection fails; a string of `expect_len` bytes (or
// any status when expect_len is negative) passes.
Status CheckReply(redisContext* c, redisReply* reply, long long expect_len) {
  if (reply == nullptr) return UnavailableError(std::string("redis: ") + c->errstr);
  RedisReplyPtr owned(reply);
  if (reply->type == REDIS_REPLY_ERROR) return InternalError(std::string("redis: ") + reply->str);
  if (expect_len >= 0 &&
      (reply->type != REDIS_REPLY_STRING || static_cast<long long>(reply->len) != expect_len)) {
    return InternalError("redis returned a value of the wrong size");
  }
  return Status::Ok();
}

struct MemcachedFree {
  void operator()(memcached_st* m) const { memcached_free(m); }
};

}  // namespace

Result<Json> RedisTransferTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  BM_ASSIGN_OR_RETURN(RedisConnection redis, ConnectRedis(task.at("port").get<int>()));
  const std::vector<std::byte> data = PatternBytes(size);
  auto put = [&](int key) {
    const std::string k = Key(key);
    auto* reply = static_cast<redisReply*>(
        redisCommand(redis.get(), "SET %b %b", k.data(), k.size(), data.data(), data.size()));
    return CheckReply(redis.get(), reply, -1);
  };
  auto get = [&](int key) {
    const std::string k = Key(key);
    auto* reply = static_cast<redisReply*>(redisCommand(redis.get(), "GET %b", k.data(), k.size()));
    return CheckReply(redis.get(), reply, static_cast<long long>(size));
  };
  return MeasureTransfer(DurationOf(task), size, task.value("ids", 4), put, get);
}

Result<Json> RedisSmallGetsTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  const int ids = task.value("ids", 1000);
  const int pipeline = task.value("pipeline", 1);
  BM_ASSIGN_OR_RETURN(RedisConnection redis, ConnectRedis(task.at("port").get<int>()));
  const std::vector<std::byte> data = PatternBytes(size);
  for (int key = 0; key < ids; ++key) {
    const std::string k = Key(key);
    BM_RETURN_IF_ERROR(
        CheckReply(redis.get(),
                   static_cast<redisReply*>(redisCommand(redis.get(), "SET %b %b", k.data(),
                                                         k.size(), data.data(), data.size())),
                   -1));
  }
  int next = 0;
  // One timed operation sends `pipeline` GETs and then reads their replies (redis-benchmark -P).
  BM_ASSIGN_OR_RETURN(
      Timed rounds, RunTimed(DurationOf(task), [&]() -> Status {
        for (int i = 0; i < pipeline; ++i) {
          const std::string k = Key(next++ % ids);
          if (redisAppendCommand(redis.get(), "GET %b", k.data(), k.size()) != REDIS_OK) {
            return UnavailableError("redis: cannot queue a command");
          }
        }
        for (int i = 0; i < pipeline; ++i) {
          void* reply = nullptr;
          if (redisGetReply(redis.get(), &reply) != REDIS_OK) reply = nullptr;
          BM_RETURN_IF_ERROR(CheckReply(redis.get(), static_cast<redisReply*>(reply),
                                        static_cast<long long>(size)));
        }
        return Status::Ok();
      }));
  return Json{{"ops_per_s", rounds.per_second() * pipeline}};
}

// Workload 7's peer: the same `ids` values of `size` bytes fetched from Redis, once per
// "depth" in the task with pipelined GETs (that many sent, then their replies read, as
// redis-benchmark -P) and once per depth with MGETs of that many keys each. Each fetch opens a
// fresh connection, as blockmgr's side starts a fresh client. Returns the seconds of one whole
// fetch at the best shape, that shape, and every shape's figure.
Result<Json> RedisShuffleFetchTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  const int ids = task.value("ids", 10000);
  const int port = task.at("port").get<int>();
  const std::vector<int> depths = task.value("depths", std::vector<int>{16, 64, 256, 1024});
  {
    BM_ASSIGN_OR_RETURN(RedisConnection redis, ConnectRedis(port));
    const std::vector<std::byte> data = PatternBytes(size);
    for (int key = 0; key < ids; ++key) {
      const std::string k = Key(key);
      BM_RETURN_IF_ERROR(
          CheckReply(redis.get(),
                     static_cast<redisReply*>(redisCommand(redis.get(), "SET %b %b", k.data(),
                                                           k.size(), data.data(), data.size())),
                     -1));
    }
  }
  std::vector<std::string> keys;
  for (int key = 0; key < ids; ++key) keys.push_back(Key(key));

  auto pipelined_gets = [&](redisContext* c, int depth) -> Status {
    for (int first = 0; first < ids; first += depth) {
      const int n = std::min(depth, ids - first);
      for (int i = 0; i < n; ++i) {
        const std::string& k = keys[first + i];
        if (redisAppendCommand(c, "GET %b", k.data(), k.size()) != REDIS_OK) {
          return UnavailableError("redis: cannot queue a command");
        }
      }
      for (int i = 0; i < n; ++i) {
        void* reply = nullptr;
        if (redisGetReply(c, &reply) != REDIS_OK) reply = nullptr;
        BM_RETURN_IF_ERROR(
            CheckReply(c, static_cast<redisReply*>(reply), static_cast<long long>(size)));
      }
    }
    return Status::Ok();
  };
  auto mgets = [&](redisContext* c, int depth) -> Status {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (int first = 0; first < ids; first += depth) {
      const int n = std::min(depth, ids - first);
      argv.assign(1, "MGET");
      lengths.assign(1, 4);
      for (int i = 0; i < n; ++i) {
        argv.push_back(keys[first + i].data());
        lengths.push_back(keys[first + i].size());
      }
      auto* reply = static_cast<redisReply*>(
          redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data()));
      if (reply == nullptr) return UnavailableError(std::string("redis: ") + c->errstr);
      RedisReplyPtr owned(reply);
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != static_cast<size_t>(n)) {
        return InternalError("redis MGET returned a wrong reply");
      }
      for (size_t i = 0; i < reply->elements; ++i) {
        if (reply->element[i]->type != REDIS_REPLY_STRING || reply->element[i]->len != size) {
          return InternalError("redis MGET returned a value of the wrong size");
        }
      }
    }
    return Status::Ok();
  };

  Json shapes = Json::object();
  double best = 0;
  std::string best_shape;
  for (const char* kind : {"GET -P", "MGET"}) {
    for (int depth : depths) {
      BM_ASSIGN_OR_RETURN(Timed fetches, RunTimed(DurationOf(task), [&]() -> Status {
                            BM_ASSIGN_OR_RETURN(RedisConnection redis, ConnectRedis(port));
                            return std::string(kind) == "MGET" ? mgets(redis.get(), depth)
                                                               : pipelined_gets(redis.get(), depth);
                          }));
      const double seconds = fetches.seconds / static_cast<double>(fetches.ops);
      const std::string shape = std::string(kind) + " " + std::to_string(depth);
      shapes[shape] = seconds;
      if (best_shape.empty() || seconds < best) {
        best = seconds;
        best_shape = shape;
      }
    }
  }
  return Json{{"fetch_seconds", best}, {"best_shape", best_shape}, {"shapes", shapes}};
}

Result<Json> MemcachedTransferTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  std::unique_ptr<memcached_st, MemcachedFree> mc(memcached_create(nullptr));
  if (!mc) return InternalError("memcached_create failed");
  memcached_server_add(mc.get(), "127.0.0.1", static_cast<in_port_t>(task.at("port").get<int>()));
  memcached_behavior_set(mc.get(), MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
  const std::vector<std::byte> data = PatternBytes(size);
  auto put = [&](int key) -> Status {
    const std::string k = Key(key);
    memcached_return_t rc =
        memcached_set(mc.get(), k.data(), k.size(), reinterpret_cast<const char*>(data.data()),
                      data.size(), 0, 0);
    if (rc != MEMCACHED_SUCCESS) {
      return InternalError(std::string("memcached set: ") + memcached_strerror(mc.get(), rc));
    }
    return Status::Ok();
  };
  auto get = [&](int key) -> Status {
    const std::string k = Key(key);
    size_t length = 0;
    uint32_t flags = 0;
    memcached_return_t rc;
    char* value = memcached_get(mc.get(), k.data(), k.size(), &length, &flags, &rc);
    std::unique_ptr<char, decltype(&std::free)> owned(value, &std::free);
    if (rc != MEMCACHED_SUCCESS || value == nullptr) {
      return InternalError(std::string("memcached get: ") + memcached_strerror(mc.get(), rc));
    }
    if (length != size) return InternalError("memcached returned a value of the wrong size");
    return Status::Ok();
  };
  return MeasureTransfer(DurationOf(task), size, task.value("ids", 4), put, get);
}

// Redis at its best for a whole shuffle, mappers and reducers in `processes` processes each:
// "append": every map APPENDs its piece to one key per partition (one pipeline per map), each
// reducer GETs its partitions' keys; "mget": every map SETs a key per piece (pipelined), each
// reducer MGETs its partition's keys. Both shapes are timed; the best is the figure.
Result<Json> RedisShuffleTask(const Json& task) {
  const int port = task.at("port").get<int>();
  const uint32_t maps = task.at("maps").get<uint32_t>();
  const uint32_t partitions = task.at("partitions").get<uint32_t>();
  const uint64_t size = task.at("size").get<uint64_t>();
  const int processes = task.value("processes", 4);
  const std::vector<std::byte> piece = PatternBytes(size);
  auto piece_key = [](uint32_t map, uint32_t partition) {
    return "s:" + std::to_string(map) + ":" + std::to_string(partition);
  };
  auto partition_key = [](uint32_t partition) { return "p:" + std::to_string(partition); };
  auto flush = [&]() -> Status {
    BM_ASSIGN_OR_RETURN(RedisConnection redis, ConnectRedis(port));
    return CheckReply(redis.get(), static_cast<redisReply*>(redisCommand(redis.get(), "FLUSHALL")),
                      -1);
  };
  auto drain = [](redisContext* c, size_t replies, long long expect_len) -> Status {
    for (size_t i = 0; i < replies; ++i) {
      void* reply = nullptr;
      if (redisGetReply(c, &reply) != REDIS_OK) reply = nullptr;
      BM_RETURN_IF_ERROR(CheckReply(c, static_cast<redisReply*>(reply), expect_len));
    }
    return Status::Ok();
  };
  Json out;
  for (const std::string shape : {"append", "mget"}) {
    BM_RETURN_IF_ERROR(flush());
    const auto start = std::chrono::steady_clock::now();
    BM_RETURN_IF_ERROR(RunInProcesses(processes, [&](int process) -> Status {
      BM_ASSIGN_OR_RETURN(RedisConnection redis, ConnectRedis(port));
      for (uint32_t map = process; map < maps; map += processes) {
        for (uint32_t partition = 0; partition < partitions; ++partition) {
          const std::string key =
              shape == "append" ? partition_key(partition) : piece_key(map, partition);
          if (redisAppendCommand(redis.get(), shape == "append" ? "APPEND %b %b" : "SET %b %b",
                                 key.data(), key.size(), piece.data(), piece.size()) != REDIS_OK) {
            return UnavailableError("redis: cannot queue a command");
          }
        }
        BM_RETURN_IF_ERROR(drain(redis.get(), partitions, -1));
      }
      return Status::Ok();
    }));
    const auto read_start = std::chrono::steady_clock::now();
    BM_RETURN_IF_ERROR(RunInProcesses(processes, [&](int process) -> Status {
      BM_ASSIGN_OR_RETURN(RedisConnection redis, ConnectRedis(port));
      for (uint32_t partition = process; partition < partitions; partition += processes) {
        if (shape == "append") {
          const std::string key = partition_key(partition);
          BM_RETURN_IF_ERROR(CheckReply(
              redis.get(),
              static_cast<redisReply*>(redisCommand(redis.get(), "GET %b", key.data(), key.size())),
              static_cast<long long>(size * maps)));
          continue;
        }
        std::vector<std::string> keys;
        for (uint32_t map = 0; map < maps; ++map) keys.push_back(piece_key(map, partition));
        std::vector<const char*> argv{"MGET"};
        std::vector<size_t> lengths{4};
        for (const std::string& key : keys) {
          argv.push_back(key.data());
          lengths.push_back(key.size());
        }
        auto* reply = static_cast<redisReply*>(redisCommandArgv(
            redis.get(), static_cast<int>(argv.size()), argv.data(), lengths.data()));
        if (reply == nullptr) return UnavailableError("redis MGET failed");
        RedisReplyPtr owned(reply);
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != maps) {
          return InternalError("redis MGET returned a wrong reply");
        }
      }
      return Status::Ok();
    }));
    const auto end = std::chrono::steady_clock::now();
    out[shape + "_end_to_end_seconds"] = std::chrono::duration<double>(end - start).count();
    out[shape + "_read_seconds"] = std::chrono::duration<double>(end - read_start).count();
  }
  BM_RETURN_IF_ERROR(flush());
  const bool append_best = out["append_end_to_end_seconds"].get<double>() <=
                           out["mget_end_to_end_seconds"].get<double>();
  const std::string best = append_best ? "append" : "mget";
  out["end_to_end_seconds"] = out[best + "_end_to_end_seconds"];
  out["read_seconds"] =
      std::min(out["append_read_seconds"].get<double>(), out["mget_read_seconds"].get<double>());
  out["best_shape"] =
      append_best ? "pipelined APPEND, GET per partition" : "pipelined SET, MGET per partition";
  return out;
}

}  // namespace bm::bench
