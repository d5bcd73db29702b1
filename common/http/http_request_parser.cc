#include "common/http/http_request_parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace bm {
namespace {

constexpr size_t kMaxHeaders = 100;

ParsedHttpHead Bad(int status, std::string error) {
  ParsedHttpHead parsed;
  parsed.outcome = ParsedHttpHead::Outcome::kBad;
  parsed.status = status;
  parsed.error = std::move(error);
  return parsed;
}

std::string Lower(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// Whether a comma-separated header value (e.g. Connection) holds `token`, ignoring case.
bool HasToken(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (Lower(Trim(value.substr(0, comma))) == token) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::multimap<std::string, std::string> ParseQuery(std::string_view query) {
  std::multimap<std::string, std::string> params;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (!pair.empty()) {
      const size_t equals = pair.find('=');
      params.emplace(DecodeUrl(pair.substr(0, equals), true),
                     equals == std::string_view::npos ? std::string()
                                                      : DecodeUrl(pair.substr(equals + 1), true));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return params;
}

}  // namespace

std::string DecodeUrl(std::string_view text, bool plus_is_space) {
  std::string decoded;
  decoded.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && HexValue(text[i + 1]) >= 0 &&
        HexValue(text[i + 2]) >= 0) {
      decoded.push_back(static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2])));
      i += 2;
    } else if (text[i] == '+' && plus_is_space) {
      decoded.push_back(' ');
    } else {
      decoded.push_back(text[i]);
    }
  }
  return decoded;
}

ParsedHttpHead ParseHttpRequestHead(std::string_view bytes) {
  const size_t end = bytes.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (bytes.size() > kMaxHttpHeadBytes) return Bad(431, "request head too large");
    return {};
  }
  if (end + 4 > kMaxHttpHeadBytes) return Bad(431, "request head too large");
  std::string_view rest = bytes.substr(0, end + 2);  // every line ends with CRLF

  const size_t line_end = rest.find("\r\n");
  const std::string_view line = rest.substr(0, line_end);
  rest.remove_prefix(line_end + 2);
  const size_t first_space = line.find(' ');
  const size_t last_space = line.rfind(' ');
  if (first_space == std::string_view::npos || first_space == last_space) {
    return Bad(400, "malformed request line");
  }
  ParsedHttpHead parsed;
  HttpRequestHead& head = parsed.head;
  head.method = std::string(line.substr(0, first_space));
  const std::string_view target = line.substr(first_space + 1, last_space - first_space - 1);
  const std::string_view version = line.substr(last_space + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return Bad(505, "HTTP/1.0 or 1.1 only");
  if (target.empty() || target.front() != '/') return Bad(400, "the target must be a path");
  const size_t question = target.find('?');
  head.path = DecodeUrl(target.substr(0, question), false);
  if (question != std::string_view::npos) head.params = ParseQuery(target.substr(question + 1));

  bool close = false;
  bool keep_alive = false;
  bool has_length = false;
  size_t headers = 0;
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    const std::string_view header = rest.substr(0, eol);
    rest.remove_prefix(eol + 2);
    if (++headers > kMaxHeaders) return Bad(431, "too many request headers");
    const size_t colon = header.find(':');
    if (colon == std::string_view::npos || colon == 0) return Bad(400, "malformed header");
    const std::string name = Lower(header.substr(0, colon));
    const std::string_view value = Trim(header.substr(colon + 1));
    if (name == "content-length") {
      size_t length = 0;
      auto [ptr, error] = std::from_chars(value.data(), value.data() + value.size(), length);
      if (error != std::errc() || ptr != value.data() + value.size() ||
          (has_length && length != head.content_length)) {
        return Bad(400, "malformed Content-Length");
      }
      has_length = true;
      head.content_length = length;
    } else if (name == "transfer-encoding") {
      return Bad(501, "request bodies in Transfer-Encoding are not accepted");
    } else if (name == "connection") {
      close = close || HasToken(value, "close");
      keep_alive = keep_alive || HasToken(value, "keep-alive");
    }
  }
  head.keep_alive = !close && (version == "HTTP/1.1" || keep_alive);
  parsed.outcome = ParsedHttpHead::Outcome::kComplete;
  parsed.size = end + 4;
  return parsed;
}

}  // namespace bm
