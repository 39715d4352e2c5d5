#include "cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mlakit {
namespace cpu {
namespace {

thread_local bool t_inside_pool_job = false;

class Pool {
 public:
  Pool() {
    const unsigned hw = std::thread::hardware_concurrency();
    size_ = hw == 0 ? 1 : static_cast<int>(hw);
    for (int w = 0; w + 1 < size_; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (auto& t : workers_) t.join();
  }

  int size() const { return size_; }

  void run(int64_t n, int max_threads, const std::function<void(int64_t)>& fn) {
    std::lock_guard<std::mutex> job_lock(job_mu_);  // one job at a time
    const int threads = static_cast<int>(std::min<int64_t>({n, max_threads, size_}));
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0, std::memory_order_relaxed);
      helpers_ = threads - 1;  // workers with index < helpers_ take part
      pending_ = static_cast<int>(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    cv_work_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [this] { return pending_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void drain() {
    t_inside_pool_job = true;
    for (;;) {
      const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_) break;
      try {
        (*fn_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        next_.store(n_, std::memory_order_relaxed);  // stop handing out work
      }
    }
    t_inside_pool_job = false;
  }

  void worker_loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      bool take_part;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        take_part = index < helpers_;
      }
      if (take_part) drain();
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }

  int size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex job_mu_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  int helpers_ = 0;
  int pending_ = 0;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

int pool_size() { return pool().size(); }

int run_threads() {
  const int all = pool_size();
  const char* env = std::getenv("MLAKIT_CPU_THREADS");
  if (env == nullptr || env[0] == '\0') return all;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1) return all;
  return static_cast<int>(std::min<long>(n, all));
}

void parallel_for(int64_t n, int max_threads, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (t_inside_pool_job || max_threads <= 1 || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool().run(n, max_threads, fn);
}

}  // namespace cpu
}  // namespace mlakit
