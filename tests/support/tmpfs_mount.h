#pragma once

#include <string>

namespace bm::testing {

// A tmpfs of `size` (e.g. "64m") mounted on `dir` until Unmount() or destruction, lazily
// unmounted (even while a process still has files open on it): a small disk a test can fill,
// fail or take away. `read_only`: mounted read-only. Mounting needs root or CAP_SYS_ADMIN;
// where it is not allowed, mounted() is false and error() says why, for the test to skip with.
class TmpfsMount {
 public:
  TmpfsMount(const std::string& dir, const std::string& size, bool read_only = false);
  ~TmpfsMount() { Unmount(); }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;

  void Unmount();
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string error_;
};

// Writes the file at `path` until the filesystem holding it is full (a write fails).
void FillUp(const std::string& path);

}  // namespace bm::testing
