#include "bmctl/progress_line.h"

#include <algorithm>
#include <cstdio>

#include "common/core/byte_size.h"

namespace bm {

bool ShouldShowProgress(ProgressMode mode, uint64_t total_bytes, bool stderr_is_terminal) {
  switch (mode) {
    case ProgressMode::kOn:
      return true;
    case ProgressMode::kOff:
      return false;
    case ProgressMode::kAuto:
      return stderr_is_terminal && total_bytes >= kProgressMinBytes;
  }
  return false;
}

ProgressLine::ProgressLine(std::ostream& out, std::string label, uint64_t total_bytes,
                           const Clock& clock)
    : out_(out),
      label_(std::move(label)),
      total_(total_bytes),
      clock_(clock),
      start_(clock.Now()) {}

void ProgressLine::Update(uint64_t position) {
  position_ = position;
  if (drawn_ && clock_.Now() - last_draw_ < kRedrawInterval) return;
  Draw();
}

void ProgressLine::Finish() {
  Draw();
  out_ << "\n";
  out_.flush();
}

std::string ProgressLine::Render() const {
  const double seconds = std::chrono::duration<double>(clock_.Now() - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(position_) / seconds : 0;
  std::string line = label_ + "  " + FormatBytes(position_);
  if (total_ > 0) {
    const uint64_t shown = std::min(position_, total_);
    line += " / " + FormatBytes(total_) + "  " +
            std::to_string(static_cast<int>(100.0 * static_cast<double>(shown) / total_)) + "%";
  }
  if (rate > 0) {
    line += "  " + FormatBytes(static_cast<uint64_t>(rate)) + "/s";
    if (total_ > position_) {
      const uint64_t eta = static_cast<uint64_t>((total_ - position_) / rate + 0.5);
      line += eta >= 60
                  ? "  ETA " + std::to_string(eta / 60) + " min " + std::to_string(eta % 60) + " s"
                  : "  ETA " + std::to_string(eta) + " s";
    }
  }
  return line;
}

void ProgressLine::Draw() {
  std::string line = Render();
  const size_t width = line.size();
  // Blank out what a longer previous line left behind.
  if (width < last_width_) line.append(last_width_ - width, ' ');
  out_ << "\r" << line;
  out_.flush();
  last_width_ = width;
  last_draw_ = clock_.Now();
  drawn_ = true;
}

std::streamsize ProgressStreamBuf::xsgetn(char* out, std::streamsize count) {
  const std::streamsize got = source_.sgetn(out, count);
  if (got > 0) {
    position_ += static_cast<uint64_t>(got);
    progress_.Update(position_);
  }
  return got;
}

ProgressStreamBuf::int_type ProgressStreamBuf::underflow() { return source_.sgetc(); }

ProgressStreamBuf::int_type ProgressStreamBuf::uflow() {
  const int_type c = source_.sbumpc();
  if (!traits_type::eq_int_type(c, traits_type::eof())) progress_.Update(++position_);
  return c;
}

ProgressStreamBuf::pos_type ProgressStreamBuf::seekoff(off_type offset,
                                                       std::ios_base::seekdir direction,
                                                       std::ios_base::openmode which) {
  const pos_type at = source_.pubseekoff(offset, direction, which);
  if (at != pos_type(off_type(-1))) {
    position_ = static_cast<uint64_t>(off_type(at));
    progress_.Update(position_);
  }
  return at;
}

ProgressStreamBuf::pos_type ProgressStreamBuf::seekpos(pos_type position,
                                                       std::ios_base::openmode which) {
  const pos_type at = source_.pubseekpos(position, which);
  if (at != pos_type(off_type(-1))) {
    position_ = static_cast<uint64_t>(off_type(at));
    progress_.Update(position_);
  }
  return at;
}

}  // namespace bm
