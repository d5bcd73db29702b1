#pragma once

#include <cstdint>
#include <ostream>
#include <streambuf>
#include <string>

#include "common/core/clock.h"

namespace bm {

// Whether bmctl shows progress for a transfer: --progress / --no-progress force it; otherwise
// only for transfers of at least kProgressMinBytes when stderr is a terminal.
enum class ProgressMode { kAuto, kOn, kOff };
inline constexpr uint64_t kProgressMinBytes = 64ull << 20;
bool ShouldShowProgress(ProgressMode mode, uint64_t total_bytes, bool stderr_is_terminal);

// One status line for a long transfer, redrawn in place ("\r") at most every
// kRedrawInterval:
//   put rdd_1_0  48.0 MiB / 256.0 MiB  19%  95.2 MiB/s  ETA 2 s
// Finish() draws the final state and ends the line. Not thread-safe; the clock and the stream
// are borrowed.
class ProgressLine {
 public:
  static constexpr Duration kRedrawInterval = std::chrono::milliseconds(200);

  ProgressLine(std::ostream& out, std::string label, uint64_t total_bytes, const Clock& clock);

  // The transfer is now at `position` bytes (it may move back when a put starts over).
  void Update(uint64_t position);
  void Advance(uint64_t bytes) { Update(position_ + bytes); }
  void Finish();

  // The line as it would be drawn now, without "\r".
  std::string Render() const;

 private:
  void Draw();

  std::ostream& out_;
  const std::string label_;
  const uint64_t total_;
  const Clock& clock_;
  const TimePoint start_;
  TimePoint last_draw_{};
  bool drawn_ = false;
  size_t last_width_ = 0;
  uint64_t position_ = 0;
};

// A read-only stream buffer over another that reports every read and seek position to a
// ProgressLine, so that a put reading a file through std::istream shows progress and can still
// rewind to retry elsewhere. Borrows both.
class ProgressStreamBuf : public std::streambuf {
 public:
  ProgressStreamBuf(std::streambuf& source, ProgressLine& progress)
      : source_(source), progress_(progress) {}

 protected:
  std::streamsize xsgetn(char* out, std::streamsize count) override;
  int_type underflow() override;
  int_type uflow() override;
  pos_type seekoff(off_type offset, std::ios_base::seekdir direction,
                   std::ios_base::openmode which) override;
  pos_type seekpos(pos_type position, std::ios_base::openmode which) override;

 private:
  std::streambuf& source_;
  ProgressLine& progress_;
  uint64_t position_ = 0;
};

}  // namespace bm
