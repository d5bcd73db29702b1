// What CURVE costs per byte on this machine, without ZeroMQ: libzmq 4.3 seals every frame it
// sends with crypto_box_afternm (XSalsa20-Poly1305 under the connection's precomputed key,
// the plaintext preceded by 32 zero bytes) and opens every frame it receives with
// crypto_box_open_afternm. A transfer pays one seal (the sender's I/O thread) and one open (the
// receiver's) per byte, so these rates bound a single connection's throughput.

#include <sodium.h>

#include <cstring>
#include <vector>

#include "bench/tasks.h"

namespace bm::bench {

Result<Json> CurveCryptoTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  if (sodium_init() < 0) return InternalError("libsodium failed to initialise");
  unsigned char sender_public[crypto_box_PUBLICKEYBYTES], sender_secret[crypto_box_SECRETKEYBYTES];
  unsigned char receiver_public[crypto_box_PUBLICKEYBYTES],
      receiver_secret[crypto_box_SECRETKEYBYTES];
  crypto_box_keypair(sender_public, sender_secret);
  crypto_box_keypair(receiver_public, receiver_secret);
  unsigned char seal_key[crypto_box_BEFORENMBYTES], open_key[crypto_box_BEFORENMBYTES];
  if (crypto_box_beforenm(seal_key, receiver_public, sender_secret) != 0 ||
      crypto_box_beforenm(open_key, sender_public, receiver_secret) != 0) {
    return InternalError("crypto_box_beforenm failed");
  }
  std::vector<unsigned char> plain(crypto_box_ZEROBYTES + size, 0);
  for (uint64_t i = 0; i < size; ++i)
    plain[crypto_box_ZEROBYTES + i] = static_cast<unsigned char>(i * 131);
  std::vector<unsigned char> box(plain.size());
  std::vector<unsigned char> opened(plain.size());
  unsigned char nonce[crypto_box_NONCEBYTES] = {};

  BM_ASSIGN_OR_RETURN(Timed seals, RunTimed(DurationOf(task), [&] {
                        ++nonce[0];
                        crypto_box_afternm(box.data(), plain.data(), plain.size(), nonce, seal_key);
                        return Status::Ok();
                      }));
  BM_ASSIGN_OR_RETURN(
      Timed opens, RunTimed(DurationOf(task), [&]() -> Status {
        if (crypto_box_open_afternm(opened.data(), box.data(), box.size(), nonce, open_key) != 0) {
          return InternalError("a sealed frame did not open");
        }
        return Status::Ok();
      }));
  if (std::memcmp(opened.data() + crypto_box_ZEROBYTES, plain.data() + crypto_box_ZEROBYTES,
                  size) != 0) {
    return InternalError("an opened frame differs from the sealed one");
  }
  return Json{{"seal_bytes_per_s", seals.per_second() * static_cast<double>(size)},
              {"open_bytes_per_s", opens.per_second() * static_cast<double>(size)}};
}

}  // namespace bm::bench
