#pragma once

// ThreadSanitizer annotations for synchronisation TSan cannot see.
//
// libzmq (and Debian's RocksDB) are not built with -fsanitize=thread, so TSan does not see the
// atomics and lock-free queues through which libzmq hands a frame from one thread to another
// (an inproc pipe, or a frame whose buffer a zero-copy free function releases on libzmq's I/O
// thread). Without help it reports the reader of such a frame as racing with its writer. The
// transport marks each hand-over explicitly: BM_TSAN_RELEASE(buffer) just before ZeroMQ takes
// a buffer, BM_TSAN_ACQUIRE(buffer) once it hands one back. Both compile to nothing without
// -fsanitize=thread.
//
// What libzmq and RocksDB do inside themselves (their own threads touching their own buffers
// through intercepted calls such as memcpy and free) is covered by the suppressions in
// common/net/transport.cc (__tsan_default_suppressions), which name only those libraries.

#if defined(__SANITIZE_THREAD__)
#define BM_TSAN_ENABLED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BM_TSAN_ENABLED 1
#endif
#endif

#if defined(BM_TSAN_ENABLED)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define BM_TSAN_RELEASE(addr) __tsan_release(const_cast<void*>(static_cast<const void*>(addr)))
#define BM_TSAN_ACQUIRE(addr) __tsan_acquire(const_cast<void*>(static_cast<const void*>(addr)))
#else
#define BM_TSAN_RELEASE(addr) ((void)(addr))
#define BM_TSAN_ACQUIRE(addr) ((void)(addr))
#endif
