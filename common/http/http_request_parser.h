#pragma once

// Reads the head of an HTTP/1.x request (request line and headers) from the bytes a connection
// has received so far, for HttpServer. Every request is hostile until parsed: the head is
// bounded in size and in header count, and anything malformed is answered with the status to
// send, never an exception.

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

namespace bm {

// The most bytes a request head may have; beyond it the request is refused (431).
inline constexpr size_t kMaxHttpHeadBytes = 16 * 1024;

struct HttpRequestHead {
  std::string method;                              // "GET", "HEAD", ...
  std::string path;                                // percent-decoded, starts with '/'
  std::multimap<std::string, std::string> params;  // decoded query parameters
  size_t content_length = 0;                       // bytes of body that follow the head
  bool keep_alive = false;  // what the client asked for (HTTP/1.1 unless "close")
};

struct ParsedHttpHead {
  enum class Outcome {
    kIncomplete,  // the head has not ended yet; read more
    kComplete,    // `head` holds it, and it took `size` bytes
    kBad,         // answer `status` with `error`, then close the connection
  };
  Outcome outcome = Outcome::kIncomplete;
  HttpRequestHead head;
  size_t size = 0;
  int status = 0;
  std::string error;
};

// Parses the request head at the start of `bytes` (which may hold more than the head).
ParsedHttpHead ParseHttpRequestHead(std::string_view bytes);

// Decodes %XX escapes (and '+' as a space when `plus_is_space`, as in query strings). A '%' not
// followed by two hex digits is kept as it is.
std::string DecodeUrl(std::string_view text, bool plus_is_space);

}  // namespace bm
