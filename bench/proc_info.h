#pragma once

// What /proc tells bm-bench about its processes and the servers it measures.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace bm::bench {

// A field of /proc/<pid>/status in bytes ("VmRSS", "VmHWM"); nullopt when unreadable.
std::optional<uint64_t> ProcStatusBytes(pid_t pid, const std::string& field);
// User plus system CPU seconds `pid` has used so far (all its threads); 0 when unreadable.
double ProcessCpuSeconds(pid_t pid);
// Resets the kernel's peak-RSS mark (VmHWM) of a process to its current RSS.
bool ResetPeakRss(pid_t pid);

// The directory holding this executable (bm-bench lives next to bm-master and bm-worker).
std::string OwnBinaryDir();

}  // namespace bm::bench
