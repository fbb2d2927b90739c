// Clang's thread-safety analysis (-Wthread-safety): attributes that say which mutex guards a
// member and which a function needs, so that the compiler checks what comments used to say.
// They expand to nothing on other compilers; clang builds of vramd turn the analysis on and
// make its findings errors (cmake/thread_safety.cmake).
//
// libstdc++'s std::mutex carries no attributes, so annotated code locks vramd::Mutex or
// vramd::SharedMutex with their scoped locks (core/mutex.h). Used as:
//
//   class Queue {
//    public:
//     void Push(Task t) EXCLUDES(mu_);       // takes mu_ itself
//    private:
//     void PopLocked() REQUIRES(mu_);        // the caller holds mu_
//     Mutex mu_;
//     std::deque<Task> tasks_ GUARDED_BY(mu_);
//   };
//
// What clang checks, and what it does not: an access to a GUARDED_BY member without its
// mutex held; a call to a REQUIRES function without, or to an EXCLUDES one with, the mutex
// held; a lock released twice or left held at the end of a scope. It knows nothing of lambdas
// run under a lock elsewhere (their bodies are analyzed holding nothing), and it checks an
// ACQUIRED_BEFORE / ACQUIRED_AFTER order only under -Wthread-safety-beta, so a lock order is
// still written in prose where it matters (ThreadSanitizer's lock-order check sees the rest).
// NO_THREAD_SAFETY_ANALYSIS turns the analysis off for one function: say why beside it.
//
// The names follow clang's documentation ("Thread Safety Analysis", mutex.h), so they read as
// in other code bases.
#pragma once

#if defined(__clang__)
#define VRAMD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define VRAMD_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are capabilities (mutexes); the string names the kind in messages.
#define CAPABILITY(x) VRAMD_THREAD_ANNOTATION(capability(x))
// On a class: an RAII lock, which acquires in its constructor and releases in its destructor.
#define SCOPED_CAPABILITY VRAMD_THREAD_ANNOTATION(scoped_lockable)

// On a member or variable: reading needs `x` held (shared suffices), writing needs it held
// exclusively.
#define GUARDED_BY(x) VRAMD_THREAD_ANNOTATION(guarded_by(x))
// On a pointer (or smart pointer): the same for what it points to; the pointer itself is not
// guarded.
#define PT_GUARDED_BY(x) VRAMD_THREAD_ANNOTATION(pt_guarded_by(x))

// On a mutex member: the order mutexes are taken in (checked only with -Wthread-safety-beta).
#define ACQUIRED_BEFORE(...) VRAMD_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) VRAMD_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// On a function: the caller holds these exclusively (REQUIRES) or at least shared
// (REQUIRES_SHARED), on entry and on return.
#define REQUIRES(...) VRAMD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) VRAMD_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))

// On a function: it acquires (and holds on return) or releases these. With no argument, on a
// member of a CAPABILITY or SCOPED_CAPABILITY class: the object itself.
#define ACQUIRE(...) VRAMD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) VRAMD_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) VRAMD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) VRAMD_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
// Releases however it was held (a scoped lock's destructor, shared or exclusive).
#define RELEASE_GENERIC(...) VRAMD_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
// Acquires when it returns the first argument (true for a try_lock).
#define TRY_ACQUIRE(...) VRAMD_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define TRY_ACQUIRE_SHARED(...) \
  VRAMD_THREAD_ANNOTATION(try_acquire_shared_capability(__VA_ARGS__))

// On a function: the caller must not hold these (the function takes them itself; holding one
// would deadlock).
#define EXCLUDES(...) VRAMD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// On a function: tells the analysis the capability is held from here on, where it cannot see
// why (checked at run time, if at all, by the function itself).
#define ASSERT_CAPABILITY(x) VRAMD_THREAD_ANNOTATION(assert_capability(x))
#define ASSERT_SHARED_CAPABILITY(x) VRAMD_THREAD_ANNOTATION(assert_shared_capability(x))

// On a function: it returns (a reference to) this capability, so callers' locks of the result
// count as locks of `x`.
#define RETURN_CAPABILITY(x) VRAMD_THREAD_ANNOTATION(lock_returned(x))

// On a function definition: not analyzed.
#define NO_THREAD_SAFETY_ANALYSIS VRAMD_THREAD_ANNOTATION(no_thread_safety_analysis)
