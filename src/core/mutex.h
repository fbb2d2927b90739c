// Mutex and SharedMutex: std::mutex and std::shared_mutex with clang's capability annotations
// (core/thread_annotations.h), and the scoped locks to take them with, so that -Wthread-safety
// checks the GUARDED_BY / REQUIRES / EXCLUDES rules of code that uses them. Each is its std::
// type and nothing more: the same size, and every call inline.
//
//   Mutex mu_;
//   std::deque<Task> tasks_ GUARDED_BY(mu_);
//   std::condition_variable wake_;
//
//   void Push(Task t) EXCLUDES(mu_) {
//     MutexLock lock(mu_);
//     tasks_.push_back(std::move(t));
//     wake_.notify_one();
//   }
//   Task Pop() EXCLUDES(mu_) {
//     MutexLock lock(mu_);
//     lock.Wait(wake_, [this]() REQUIRES(mu_) { return !tasks_.empty(); });
//     ...
//   }
//
// Condition variables: MutexLock waits on a std::condition_variable (or, with a stop_token, a
// std::condition_variable_any). The mutex is released while the thread blocks and held again
// when the wait returns, as the analysis assumes throughout, so what it checks before and after
// the wait is right. A predicate is a lambda analyzed on its own (holding nothing), so one that
// reads guarded members says REQUIRES(mu_) as above; the wait calls it only with the mutex held.
//
// Thread safety: as the std:: types they wrap. A MutexLock, ReaderLock or WriterLock is used by
// the thread that made it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <stop_token>

#include "core/thread_annotations.h"

namespace vramd {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Tells the analysis that the caller holds this mutex, where it cannot see so (code reached
  // only from a function that holds it, through a callback). Checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction (or to Unlock).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Lets go for a stretch that must not hold the mutex (a callback, a backend call), and takes
  // it again. REQUIRES: Unlock while held, Lock while not.
  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

  // cv.wait / wait_until / wait_for with this lock (see the top of this file). REQUIRES: held.
  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  template <typename Predicate>
  void Wait(std::condition_variable& cv, Predicate ready) NO_THREAD_SAFETY_ANALYSIS {
    cv.wait(lock_, std::move(ready));
  }
  template <typename Clock, typename Duration>
  std::cv_status WaitUntil(std::condition_variable& cv,
                           const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv.wait_until(lock_, deadline);
  }
  // Whether `ready` held when the wait ended (false: the deadline passed first).
  template <typename Clock, typename Duration, typename Predicate>
  bool WaitUntil(std::condition_variable& cv,
                 const std::chrono::time_point<Clock, Duration>& deadline,
                 Predicate ready) NO_THREAD_SAFETY_ANALYSIS {
    return cv.wait_until(lock_, deadline, std::move(ready));
  }
  // The same on a std::condition_variable_any that a stop request on `stop` also ends (C++20's
  // interruptible waits, for a std::jthread's loop): whether `ready` held when the wait ended
  // (false: stopped, or the deadline passed, first).
  template <typename Predicate>
  bool Wait(std::condition_variable_any& cv, std::stop_token stop,
            Predicate ready) NO_THREAD_SAFETY_ANALYSIS {
    return cv.wait(lock_, std::move(stop), std::move(ready));
  }
  template <typename Clock, typename Duration, typename Predicate>
  bool WaitUntil(std::condition_variable_any& cv, std::stop_token stop,
                 const std::chrono::time_point<Clock, Duration>& deadline,
                 Predicate ready) NO_THREAD_SAFETY_ANALYSIS {
    return cv.wait_until(lock_, std::move(stop), deadline, std::move(ready));
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

class CAPABILITY("shared mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void LockShared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex exclusively for its lifetime.
class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~WriterLock() RELEASE() { mu_.Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex shared for its lifetime.
class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.LockShared(); }
  ~ReaderLock() RELEASE() { mu_.UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace vramd
