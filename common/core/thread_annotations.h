#pragma once

// Clang's thread-safety attributes (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html),
// empty for other compilers. Used with bm::Mutex (common/core/mutex.h).

#if defined(__clang__)
#define BM_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define BM_THREAD_ANNOTATION(x)
#endif

#define BM_CAPABILITY(x) BM_THREAD_ANNOTATION(capability(x))
#define BM_SCOPED_CAPABILITY BM_THREAD_ANNOTATION(scoped_lockable)
// The member may be read or written only with the mutex held.
#define BM_GUARDED_BY(x) BM_THREAD_ANNOTATION(guarded_by(x))
// What the pointer points to may be used only with the mutex held.
#define BM_PT_GUARDED_BY(x) BM_THREAD_ANNOTATION(pt_guarded_by(x))
// The function must be called with the mutex held.
#define BM_REQUIRES(...) BM_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// The function must be called without the mutex held (it takes it).
#define BM_EXCLUDES(...) BM_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define BM_ACQUIRE(...) BM_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define BM_RELEASE(...) BM_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define BM_NO_THREAD_SAFETY_ANALYSIS BM_THREAD_ANNOTATION(no_thread_safety_analysis)
