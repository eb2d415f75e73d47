// weft_torch: torch.distributed's backend "weft" over libweft (torch 1.13's
// c10d::ProcessGroup). C++ only because ProcessGroup is a C++ class; every
// byte moves through weft's C API.
//
// Each process group holds two weft communicators made through the group's
// c10d Store (weft_comm_init_kv): one for collectives, run in issue order
// by a worker thread of its own or by a caller waiting for one (CollQueue
// below), one split from it for point-to-point messages, posted from the
// caller's thread so they never wait behind a collective. A collective's
// Work completes a Future with its output tensors (DDP's communication
// hooks chain on it); a failure sets the Future's error to weft's message,
// which names the rank and the operation, and Work::wait raises it in
// Python.
#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <pybind11/chrono.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <sched.h>

#include "weft.h"

namespace {

using c10d::OpType;
using Fut = c10::ivalue::Future;

[[noreturn]] void fail(const std::string &what)
{
    throw std::runtime_error("weft: " + what);
}

// A weft call's result as an exception naming the operation and, through
// weft's message, the rank that failed.
void check(weft_comm *c, int rc, const char *op)
{
    if (rc == 0)
        return;
    const char *msg = c ? weft_comm_error(c) : "";
    fail(std::string(op) + " failed: " + (msg && *msg ? msg : weft_strerror(rc)) + " (" +
         weft_strerror(rc) + ")");
}

bool weft_dtype_of(at::ScalarType s, weft_dtype *out)
{
    switch (s) {
    case at::kFloat: *out = WEFT_F32; return true;
    case at::kDouble: *out = WEFT_F64; return true;
    case at::kHalf: *out = WEFT_F16; return true;
    case at::kBFloat16: *out = WEFT_BF16; return true;
    case at::kChar: *out = WEFT_I8; return true;
    case at::kByte: *out = WEFT_U8; return true;
    case at::kInt: *out = WEFT_I32; return true;
    case at::kLong: *out = WEFT_I64; return true;
    default: return false;
    }
}

// The (dtype, op) pair weft reduces with; bool is u8 under min (logical
// and) and max (logical or).
void reduction_of(const at::Tensor &t, const c10d::ReduceOp &op, const char *name,
                  weft_dtype *dt, weft_op *wop)
{
    switch (op.op_) {
    case c10d::ReduceOp::SUM: *wop = WEFT_SUM; break;
    case c10d::ReduceOp::AVG: *wop = WEFT_AVG; break;
    case c10d::ReduceOp::PRODUCT: *wop = WEFT_PROD; break;
    case c10d::ReduceOp::MIN: *wop = WEFT_MIN; break;
    case c10d::ReduceOp::MAX: *wop = WEFT_MAX; break;
    default:
        fail(std::string(name) + ": reduce op " + std::to_string((int)op.op_) +
             " (BAND, BOR, BXOR or PREMUL_SUM) is not supported; use SUM, AVG, PRODUCT, "
             "MIN or MAX");
    }
    if (t.scalar_type() == at::kBool && (*wop == WEFT_MIN || *wop == WEFT_MAX)) {
        *dt = WEFT_U8;
        return;
    }
    if (!weft_dtype_of(t.scalar_type(), dt))
        fail(std::string(name) + ": dtype " + std::string(c10::toString(t.scalar_type())) +
             " is not supported (float32, float64, float16, bfloat16, int8, uint8, int32, "
             "int64; bool with MIN/MAX)");
}

void check_cpu(const at::Tensor &t, const char *name)
{
    if (!t.device().is_cpu())
        fail(std::string(name) + ": weft moves CPU tensors only, got one on " +
             t.device().str());
}

size_t nbytes(const at::Tensor &t)
{
    return (size_t)t.numel() * t.element_size();
}

// A contiguous tensor to work in; copied back by done() when it is a copy.
struct Dense {
    at::Tensor user, work;
    explicit Dense(const at::Tensor &t) : user(t), work(t.is_contiguous() ? t : t.contiguous())
    {
    }
    void done()
    {
        if (!work.is_same(user))
            user.copy_(work);
    }
    void *ptr() { return work.data_ptr(); }
};

// Rows of dim 0: torch's split sizes count them.
size_t row_bytes(const at::Tensor &t)
{
    return t.dim() == 0 || t.size(0) == 0 ? 0 : nbytes(t) / (size_t)t.size(0);
}

// What Work.wait(timeout) raises when the timeout passes first: the
// operation itself goes on (weft has no way to take back a collective
// that other ranks may be in), and a later wait may still see it end.
[[noreturn]] void waited_too_long(const char *what, std::chrono::milliseconds t)
{
    throw std::runtime_error(std::string("weft: ") + what + " did not complete within " +
                             std::to_string(t.count()) + " ms (Work.wait's timeout)");
}

// Wait for f, for at most timeout (kNoTimeout: for ever); the future has
// no timed wait of its own, so a callback wakes this one.
void wait_future(Fut &f, std::chrono::milliseconds timeout, const char *what)
{
    if (timeout == ::kNoTimeout) {
        f.wait();
        return;
    }
    if (f.completed())
        return;
    auto m = std::make_shared<std::mutex>();
    auto cv = std::make_shared<std::condition_variable>();
    auto done = std::make_shared<bool>(false);
    f.addCallback([m, cv, done](Fut &) {
        std::lock_guard<std::mutex> g(*m);
        *done = true;
        cv->notify_all();
    });
    std::unique_lock<std::mutex> g(*m);
    if (!cv->wait_for(g, timeout, [&] { return *done; }))
        waited_too_long(what, timeout);
}

// What a collective's job leaves behind: its outputs or its error, and a
// Future made only when one is asked for (getFuture: DDP's buckets, comm
// hooks). A synchronous call never asks, so it builds no Future, no list
// value for one and no notification: a smaller part of each call's cost,
// which with more ranks than cores every rank pays again while it waits
// for the others to be scheduled.
class Outcome : public c10::intrusive_ptr_target {
  public:
    explicit Outcome(std::vector<at::Tensor> outs) : outs_(std::move(outs)) {}
    bool done() const { return done_.load(std::memory_order_acquire); }
    // err_ is written once, before done_ is set (release), read after it.
    std::exception_ptr error() const { return done() ? err_ : nullptr; }
    const std::vector<at::Tensor> &outputs() const { return outs_; }

    // On the thread that ran the job, once.
    void finish(std::exception_ptr e)
    {
        c10::intrusive_ptr<Fut> f;
        {
            std::lock_guard<std::mutex> g(mu_);
            err_ = std::move(e);
            done_.store(true, std::memory_order_release);
            f = fut_;
        }
        if (f)
            settle(*f); /* outside the lock: it runs the Future's callbacks */
    }

    // The one Future of this job; completed by whichever of finish and
    // this comes second.
    c10::intrusive_ptr<Fut> future()
    {
        c10::intrusive_ptr<Fut> f;
        bool finished;
        {
            std::lock_guard<std::mutex> g(mu_);
            if (fut_)
                return fut_;
            fut_ = c10::make_intrusive<Fut>(c10::ListType::ofTensors());
            f = fut_;
            finished = done();
        }
        if (finished)
            settle(*f);
        return f;
    }

  private:
    void settle(Fut &f)
    {
        if (err_)
            f.setError(err_);
        else
            f.markCompleted(c10::IValue(outs_));
    }
    std::mutex mu_;
    std::vector<at::Tensor> outs_;
    std::exception_ptr err_;
    std::atomic<bool> done_{ false };
    c10::intrusive_ptr<Fut> fut_;
};

// The group's collectives, run in issue order (torch issues them in the
// same order on every rank). A worker thread runs them, so async_op calls
// and DDP's buckets go on while the caller computes. A caller that waits
// without a timeout for one that has not started runs it, and any issued
// before it, on its own thread: a synchronous call (dist.all_reduce
// without async_op) then costs no hand-off, where otherwise it pays two
// thread wake-ups (to the worker and back), each tens of microseconds when
// ranks outnumber cores. So that the worker neither wins that race nor is
// woken for nothing, a job is left to a caller for kGrace after its push,
// unless it is known to be asynchronous (its Future was asked for, it was
// polled, waited on with a timeout, or a later job was pushed behind it),
// and a push wakes the worker only when the group has been idle: while
// jobs keep coming the worker looks at the queue every kTick instead, so a
// synchronous call wakes no thread and makes no system call of its own,
// and a job nobody waits on starts within kTick. One job at a time, on
// whichever thread: a weft communicator is used by one thread at a time.
//
// Asynchronous work: while jobs reach the worker back to back, it polls
// the queue after each, yielding its core, for spin (WEFT_SPIN_US, as
// weft's own waits) before it sleeps, so a stream of Futures is picked up
// without a wake-up; and a caller waiting on a job the worker runs polls
// the same way before it sleeps. Each wake-up avoided is a futex call on
// one side and a sleeping thread scheduled on the other.
class CollQueue {
  public:
    using clock = std::chrono::steady_clock;
    static constexpr std::chrono::microseconds kGrace{ 300 };
    static constexpr std::chrono::milliseconds kTick{ 2 }, kActive{ 200 };

    explicit CollQueue(std::chrono::microseconds spin) : spin_(spin) {}

    uint64_t push(std::function<void()> fn, c10::intrusive_ptr<Outcome> out)
    {
        uint64_t seq;
        std::deque<Job> finished; /* freed here, outside the lock */
        {
            std::lock_guard<std::mutex> g(mu_);
            seq = next_++;
            auto now = clock::now();
            bool wake = sleeping_ && !ticking_; /* idle: nobody would look */
            if (!q_.empty() && q_.back().seq >= urgent_) {
                urgent_ = q_.back().seq + 1; /* not being waited on at once */
                wake = sleeping_;
            }
            q_.push_back(Job{ seq, std::move(fn), std::move(out), now + kGrace });
            last_push_ = now;
            finished.swap(done_);
            if (wake)
                worker_cv_.notify_one();
        }
        return seq;
    }

    // Jobs up to seq are asynchronous: the worker takes them without delay.
    void hurry(uint64_t seq)
    {
        std::lock_guard<std::mutex> g(mu_);
        if (seq < urgent_)
            return;
        urgent_ = seq + 1;
        last_hurry_ = clock::now();
        if (sleeping_)
            worker_cv_.notify_one();
    }

    // On the caller's thread: run every job up to seq that no thread has
    // taken, and return once job seq (whose outcome is o) has finished,
    // wherever it ran. The worker leaves them to this thread from now on.
    void help(uint64_t seq, const Outcome &o)
    {
        std::unique_lock<std::mutex> g(mu_);
        waited_ = std::max(waited_, seq + 1);
        clock::time_point poll_end{};
        bool polled = false;
        while (!o.done()) {
            if (!busy_ && !q_.empty() && q_.front().seq <= seq) {
                run_front(g);
                continue;
            }
            // the worker runs it, or one before it
            if (!polled) {
                poll_end = clock::now() + spin_;
                polled = true;
            }
            if (clock::now() < poll_end) {
                g.unlock();
                sched_yield();
                g.lock();
                continue;
            }
            callers_++;
            callers_cv_.wait(g);
            callers_--;
        }
    }

    // Wait, without running anything, until o has finished (true) or end
    // has passed (false).
    bool wait_until(const Outcome &o, clock::time_point end)
    {
        std::unique_lock<std::mutex> g(mu_);
        while (!o.done()) {
            callers_++;
            bool late = callers_cv_.wait_until(g, end) == std::cv_status::timeout;
            callers_--;
            if (late && !o.done())
                return false;
        }
        return true;
    }

    // The worker's loop; returns once stopped and drained.
    void serve()
    {
        std::unique_lock<std::mutex> g(mu_);
        clock::time_point poll_end{}, last_end{};
        for (;;) {
            if (stop_ && q_.empty() && !busy_)
                return;
            auto now = clock::now(), until = now + kTick;
            if (!busy_ && !q_.empty() && (stop_ || q_.front().seq >= waited_)) {
                const Job &j = q_.front();
                if (stop_ || j.seq < urgent_ || now >= j.ready) {
                    // Poll after this job only when jobs come back to back:
                    // this one found by polling, or asked for soon after
                    // the last one ended. DDP's buckets (one asked for
                    // while the other runs, the next step's milliseconds
                    // later) would only pay for the polls, taking turns on
                    // the cores with compute.
                    bool stream = now < poll_end ||
                                  (last_hurry_ > last_end && last_hurry_ - last_end < 2 * spin_);
                    run_front(g);
                    last_end = clock::now();
                    poll_end = stream ? last_end + spin_ : clock::time_point{};
                    continue;
                }
                until = j.ready; /* a caller may be about to wait on it */
            }
            if (now < poll_end) { /* asynchronous work may follow at once */
                g.unlock();
                sched_yield();
                g.lock();
                continue;
            }
            sleeping_ = true;
            ticking_ = now - last_push_ < kActive || until < now + kTick;
            if (ticking_)
                worker_cv_.wait_until(g, until);
            else
                worker_cv_.wait(g);
            sleeping_ = ticking_ = false;
        }
    }

    void stop()
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
        worker_cv_.notify_one();
    }

  private:
    struct Job {
        uint64_t seq;
        std::function<void()> fn; /* the weft call; throws on failure */
        c10::intrusive_ptr<Outcome> out;
        clock::time_point ready; /* the worker's from then on */
    };

    void run_front(std::unique_lock<std::mutex> &g)
    {
        Job job = std::move(q_.front());
        q_.pop_front();
        busy_ = true;
        g.unlock();
        std::exception_ptr err;
        try {
            job.fn();
        } catch (...) {
            err = std::current_exception();
        }
        job.out->finish(std::move(err));
        g.lock();
        // The job may hold the last reference to a tensor Python has let go of.
        // Freeing it on the worker would take the GIL, which a caller joining
        // the worker (destroy_process_group) holds, or which an exiting
        // interpreter has torn down. The next push frees it on a caller's thread.
        done_.push_back(std::move(job));
        busy_ = false;
        if (callers_)
            callers_cv_.notify_all(); /* waiting for this one to end */
        bool workers = stop_ || (!q_.empty() && q_.front().seq >= waited_ &&
                                 (q_.front().seq < urgent_ || clock::now() >= q_.front().ready));
        if (workers && sleeping_)
            worker_cv_.notify_one();
    }

    const std::chrono::microseconds spin_;
    std::mutex mu_;
    std::condition_variable worker_cv_, callers_cv_;
    std::deque<Job> q_;
    std::deque<Job> done_;
    clock::time_point last_push_{}, last_hurry_{};
    uint64_t next_ = 0;
    uint64_t urgent_ = 0; /* the worker takes jobs below it at once */
    uint64_t waited_ = 0; /* and leaves those below it to a waiting caller */
    int callers_ = 0;     /* in help or wait_until, waiting for a job to end */
    bool busy_ = false, stop_ = false, sleeping_ = false, ticking_ = false;
};

class WeftWork : public c10d::Work {
  public:
    WeftWork(OpType t, c10::intrusive_ptr<Outcome> o, std::shared_ptr<CollQueue> q, uint64_t seq)
        : Work(-1, t), out_(std::move(o)), q_(std::move(q)), seq_(seq)
    {
    }
    bool isCompleted() override
    {
        if (out_->done())
            return true;
        q_->hurry(seq_); /* polled: nobody runs it on their own thread */
        return false;
    }
    bool isSuccess() const override { return out_->done() && !out_->error(); }
    std::exception_ptr exception() const override { return out_->error(); }
    std::vector<at::Tensor> result() override
    {
        wait(::kNoTimeout);
        return out_->outputs();
    }
    bool wait(std::chrono::milliseconds timeout) override
    {
        if (!out_->done()) {
            if (timeout == ::kNoTimeout) {
                q_->help(seq_, *out_);
            } else {
                // the caller must stay free to give up, so it only waits
                q_->hurry(seq_);
                auto most = std::chrono::milliseconds(std::chrono::hours(24 * 365));
                if (!q_->wait_until(*out_, CollQueue::clock::now() + std::min(timeout, most)))
                    waited_too_long(c10d::opTypeToString(opType_).c_str(), timeout);
            }
        }
        if (auto e = out_->error())
            std::rethrow_exception(e);
        return true;
    }
    void synchronize() override {}
    // A Future is chained on or waited on elsewhere (DDP's buckets): the
    // worker runs the job at once and completes it.
    c10::intrusive_ptr<Fut> getFuture() override
    {
        auto f = out_->future();
        q_->hurry(seq_);
        return f;
    }

  private:
    c10::intrusive_ptr<Outcome> out_;
    std::shared_ptr<CollQueue> q_;
    uint64_t seq_;
};

// A message's Work: weft's own request, waited for on the caller's thread.
class WeftP2PWork : public c10d::Work {
  public:
    WeftP2PWork(OpType t, weft_comm *c, weft_request *r, Dense buf, int peer)
        : Work(-1, t), c_(c), req_(r), buf_(std::move(buf)), peer_(peer)
    {
    }
    ~WeftP2PWork() override
    {
        if (req_)
            weft_wait(req_);
    }
    bool isCompleted() override
    {
        std::lock_guard<std::mutex> g(m_);
        if (fut_)
            return fut_->completed();
        if (req_) {
            int done = 0, rc = weft_test(req_, &done);
            if (done)
                settle(rc);
        }
        return !req_;
    }
    bool isSuccess() const override { return !req_ && rc_ == 0; }
    int sourceRank() const override { return peer_; }
    std::vector<at::Tensor> result() override { return { buf_.user }; }
    bool wait(std::chrono::milliseconds timeout) override
    {
        const char *what = opType_ == OpType::SEND ? "send" : "recv";
        c10::intrusive_ptr<Fut> f;
        {
            std::lock_guard<std::mutex> g(m_);
            f = fut_;
        }
        if (f) { /* its thread waits on the request: wait for the future */
            wait_future(*f, timeout, what);
        } else if (timeout == ::kNoTimeout) {
            std::lock_guard<std::mutex> g(m_);
            if (req_)
                settle(weft_wait(req_));
        } else if (!poll_until(timeout == ::kNoTimeout ? std::chrono::steady_clock::time_point::max()
                                                       : std::chrono::steady_clock::now() + timeout)) {
            waited_too_long(what, timeout);
        }
        std::lock_guard<std::mutex> g(m_);
        if (rc_)
            std::rethrow_exception(err_);
        return true;
    }
    // The future completes when the message has moved: a thread of its own
    // waits on the request (from then on the only one that touches it), so
    // getFuture returns at once.
    c10::intrusive_ptr<Fut> getFuture() override
    {
        std::lock_guard<std::mutex> g(m_);
        if (fut_)
            return fut_;
        fut_ = c10::make_intrusive<Fut>(c10::ListType::create(c10::TensorType::get()));
        auto self = c10::intrusive_ptr<WeftP2PWork>::unsafe_reclaim_from_nonowning(this);
        weft_request *r = req_;
        std::thread([self, r] {
            int rc = r ? weft_wait(r) : 0;
            std::lock_guard<std::mutex> g(self->m_);
            if (self->req_)
                self->settle(rc);
            if (self->rc_)
                self->fut_->setError(self->err_);
            else
                self->fut_->markCompleted(
                    c10::IValue(std::vector<at::Tensor>{ self->buf_.user }));
        }).detach();
        return fut_;
    }

  private:
    // Look at the request, then sleep a little longer each time (never a
    // spinning core), until it is done (1) or the deadline passes (0).
    bool poll_until(std::chrono::steady_clock::time_point end)
    {
        auto nap = std::chrono::microseconds(20);
        for (;;) {
            {
                std::lock_guard<std::mutex> g(m_);
                if (!req_)
                    return true;
                int done = 0, rc = weft_test(req_, &done);
                if (done) {
                    settle(rc);
                    return true;
                }
            }
            if (std::chrono::steady_clock::now() >= end)
                return false;
            std::this_thread::sleep_for(nap);
            nap = std::min(nap * 2, std::chrono::microseconds(2000));
        }
    }
    void settle(int rc)
    {
        req_ = nullptr;
        rc_ = rc;
        if (rc) {
            try {
                check(c_, rc, opType_ == OpType::SEND ? "send" : "recv");
            } catch (...) {
                err_ = std::current_exception();
            }
        } else if (opType_ == OpType::RECV) {
            buf_.done();
        }
    }
    std::mutex m_;
    weft_comm *c_;
    weft_request *req_;
    Dense buf_;
    int peer_, rc_ = 0;
    std::exception_ptr err_;
    c10::intrusive_ptr<Fut> fut_;
};

// How long a thread of the backend polls, yielding, before it sleeps:
// WEFT_SPIN_US, as weft's own waits read it (default 50; 0: sleep at once).
std::chrono::microseconds spin_of_env()
{
    const char *s = getenv("WEFT_SPIN_US");
    if (!s || !*s)
        return std::chrono::microseconds(50);
    char *end;
    double us = strtod(s, &end);
    if (*end || !(us >= 0) || us > 1e9)
        fail(std::string("WEFT_SPIN_US=") + s + ": not a number of microseconds from 0 to 1e9");
    return std::chrono::microseconds((int64_t)us);
}

// torch's Store as weft's key-value store (weft_comm_init_kv).
struct StoreKV {
    c10::intrusive_ptr<c10d::Store> store;
    static int set(void *arg, const char *key, const void *val, size_t len)
    {
        try {
            auto *b = static_cast<const uint8_t *>(val);
            static_cast<StoreKV *>(arg)->store->set(key, std::vector<uint8_t>(b, b + len));
            return 0;
        } catch (const std::exception &e) {
            fprintf(stderr, "weft: torch store set(%s): %s\n", key, e.what());
            return WEFT_ECONFIG;
        }
    }
    static int get(void *arg, const char *key, void **val, size_t *len, double timeout_s)
    {
        try {
            auto &s = static_cast<StoreKV *>(arg)->store;
            s->wait({ key }, std::chrono::milliseconds((int64_t)(timeout_s * 1000)));
            std::vector<uint8_t> v = s->get(key);
            *val = malloc(v.size() + 1);
            if (!*val)
                return WEFT_ENOMEM;
            memcpy(*val, v.data(), v.size());
            static_cast<char *>(*val)[v.size()] = 0;
            *len = v.size();
            return 0;
        } catch (const std::exception &e) {
            fprintf(stderr, "weft: torch store get(%s): %s\n", key, e.what());
            return WEFT_ETIMEDOUT;
        }
    }
};

class WeftPG : public c10d::ProcessGroup {
  public:
    WeftPG(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
           std::chrono::milliseconds timeout)
        : ProcessGroup(rank, size)
    {
        weft_config cfg;
        weft_config_default(&cfg);
        const char *algo = getenv("WEFT_ALGO");
        if (algo && *algo && weft_algo_parse(algo, &cfg.algo))
            fail(std::string("WEFT_ALGO=") + algo + ": no such algorithm");
        cfg.rank = rank;
        cfg.world_size = size;
        cfg.timeout_s = (double)timeout.count() / 1000.0;
        cfg.connect_timeout_s = cfg.timeout_s;
        cfg.ifname = getenv("WEFT_SOCKET_IFNAME");
        StoreKV kv{ store };
        weft_kv k = { &kv, StoreKV::set, StoreKV::get };
        check(nullptr, weft_comm_init_kv(&coll_, &cfg, &k), "init (rendezvous through the store)");
        int rc = weft_comm_split(coll_, 0, rank, &p2p_);
        if (rc) {
            std::string msg = weft_comm_error(coll_);
            weft_comm_destroy(coll_);
            fail("init: point-to-point communicator: " + msg);
        }
        worker_ = std::thread([q = queue_] { q->serve(); });
    }

    ~WeftPG() override
    {
        queue_->stop();
        worker_.join();
        weft_comm_destroy(p2p_);
        weft_comm_destroy(coll_);
    }

    const std::string getBackendName() const override { return "weft"; }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &ts,
                                             const c10d::BroadcastOptions &o) override
    {
        auto t = one(ts, "broadcast");
        int root = (int)o.rootRank;
        return enqueue(OpType::BROADCAST, { t }, [this, t, root] {
            Dense d(t);
            check(coll_, weft_broadcast(coll_, d.ptr(), nbytes(t), WEFT_U8, root), "broadcast");
            d.done();
        });
    }

    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &ts,
                                             const c10d::AllreduceOptions &o) override
    {
        auto t = one(ts, "all_reduce");
        weft_dtype dt;
        weft_op op;
        reduction_of(t, o.reduceOp, "all_reduce", &dt, &op);
        return enqueue(OpType::ALLREDUCE, { t }, [this, t, dt, op] {
            Dense d(t);
            check(coll_, weft_allreduce(coll_, d.ptr(), d.ptr(), (size_t)t.numel(), dt, op),
                  "all_reduce");
            d.done();
        });
    }

    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
        std::vector<at::Tensor> &ts, const c10d::AllreduceCoalescedOptions &o) override
    {
        if (ts.empty())
            fail("all_reduce_coalesced: no tensors");
        weft_dtype dt;
        weft_op op;
        for (auto &t : ts) {
            check_cpu(t, "all_reduce_coalesced");
            if (t.scalar_type() != ts[0].scalar_type())
                fail("all_reduce_coalesced: tensors of different dtypes");
        }
        reduction_of(ts[0], o.reduceOp, "all_reduce_coalesced", &dt, &op);
        std::vector<at::Tensor> keep = ts;
        return enqueue(OpType::ALLREDUCE_COALESCED, keep, [this, keep, dt, op] {
            std::vector<at::Tensor> flat_in;
            for (auto &t : keep)
                flat_in.push_back(t.reshape({ -1 }));
            at::Tensor flat = at::cat(flat_in);
            check(coll_, weft_allreduce(coll_, flat.data_ptr(), flat.data_ptr(),
                                        (size_t)flat.numel(), dt, op),
                  "all_reduce_coalesced");
            int64_t at = 0;
            for (auto &t : keep) {
                t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
                at += t.numel();
            }
        });
    }

    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &ts,
                                          const c10d::ReduceOptions &o) override
    {
        auto t = one(ts, "reduce");
        weft_dtype dt;
        weft_op op;
        reduction_of(t, o.reduceOp, "reduce", &dt, &op);
        int root = (int)o.rootRank;
        return enqueue(OpType::REDUCE, { t }, [this, t, dt, op, root] {
            Dense d(t);
            void *recv = getRank() == root ? d.ptr() : nullptr;
            check(coll_, weft_reduce(coll_, d.ptr(), recv, (size_t)t.numel(), dt, op, root),
                  "reduce");
            if (recv)
                d.done();
        });
    }

    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outs,
                                             std::vector<at::Tensor> &ins,
                                             const c10d::AllgatherOptions &) override
    {
        auto t = one(ins, "all_gather");
        if (outs.size() != 1 || (int)outs[0].size() != getSize())
            fail("all_gather: expected one output list of " + std::to_string(getSize()) +
                 " tensors");
        auto out = outs[0];
        for (auto &o : out)
            same_shape(o, t, "all_gather");
        return enqueue(OpType::ALLGATHER, out, [this, t, out] {
            at::Tensor in = t.contiguous();
            at::Tensor flat = at::empty({ (int64_t)out.size() * t.numel() }, t.options());
            check(coll_, weft_allgather(coll_, in.data_ptr(), flat.data_ptr(), nbytes(t),
                                        WEFT_U8),
                  "all_gather");
            for (size_t i = 0; i < out.size(); i++)
                out[i].copy_(flat.narrow(0, (int64_t)i * t.numel(), t.numel()).view(t.sizes()));
        });
    }

    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &out, at::Tensor &in,
                                                   const c10d::AllgatherOptions &) override
    {
        check_cpu(in, "all_gather_into_tensor");
        check_cpu(out, "all_gather_into_tensor");
        if (out.numel() != in.numel() * getSize() || out.scalar_type() != in.scalar_type())
            fail("all_gather_into_tensor: output must hold world_size times the input's "
                 "elements, of its dtype");
        at::Tensor o = out, i = in;
        return enqueue(OpType::_ALLGATHER_BASE, { o }, [this, o, i] {
            Dense d(o);
            at::Tensor src = i.contiguous();
            check(coll_, weft_allgather(coll_, src.data_ptr(), d.ptr(), nbytes(src), WEFT_U8),
                  "all_gather_into_tensor");
            d.done();
        });
    }

    c10::intrusive_ptr<c10d::Work> allgather_coalesced(
        std::vector<std::vector<at::Tensor>> &outs, std::vector<at::Tensor> &ins,
        const c10d::AllgatherOptions &) override
    {
        if (outs.size() != (size_t)getSize())
            fail("all_gather_coalesced: expected one output list per rank");
        for (auto &t : ins)
            check_cpu(t, "all_gather_coalesced");
        auto o = outs;
        auto i = ins;
        std::vector<at::Tensor> flat_out;
        for (auto &l : o)
            for (auto &t : l)
                flat_out.push_back(t);
        return enqueue(OpType::ALLGATHER_COALESCED, flat_out, [this, o, i] {
            // one all-gather of every input as bytes, cut up on arrival
            std::vector<at::Tensor> parts;
            for (auto &t : i)
                parts.push_back(t.contiguous().view(at::kByte).reshape({ -1 }));
            at::Tensor mine = at::cat(parts);
            at::Tensor all = at::empty({ mine.numel() * (int64_t)o.size() }, mine.options());
            check(coll_, weft_allgather(coll_, mine.data_ptr(), all.data_ptr(),
                                        (size_t)mine.numel(), WEFT_U8),
                  "all_gather_coalesced");
            for (size_t r = 0; r < o.size(); r++) {
                int64_t at = (int64_t)r * mine.numel();
                for (size_t k = 0; k < o[r].size() && k < i.size(); k++) {
                    int64_t n = (int64_t)nbytes(i[k]);
                    o[r][k].view(at::kByte).reshape({ -1 }).copy_(all.narrow(0, at, n));
                    at += n;
                }
            }
        });
    }

    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outs,
                                          std::vector<at::Tensor> &ins,
                                          const c10d::GatherOptions &o) override
    {
        auto t = one(ins, "gather");
        int root = (int)o.rootRank;
        std::vector<at::Tensor> out;
        if (getRank() == root) {
            if (outs.size() != 1 || (int)outs[0].size() != getSize())
                fail("gather: the root needs one output list of " + std::to_string(getSize()) +
                     " tensors");
            out = outs[0];
            for (auto &x : out)
                same_shape(x, t, "gather");
        } else if (!outs.empty() && !outs[0].empty()) {
            fail("gather: only the root passes output tensors");
        }
        return enqueue(OpType::GATHER, out, [this, t, out, root] {
            at::Tensor in = t.contiguous(), flat;
            if (!out.empty())
                flat = at::empty({ (int64_t)out.size() * t.numel() }, t.options());
            check(coll_, weft_gather(coll_, in.data_ptr(), out.empty() ? nullptr : flat.data_ptr(),
                                     nbytes(t), WEFT_U8, root),
                  "gather");
            for (size_t i = 0; i < out.size(); i++)
                out[i].copy_(flat.narrow(0, (int64_t)i * t.numel(), t.numel()).view(t.sizes()));
        });
    }

    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outs,
                                           std::vector<std::vector<at::Tensor>> &ins,
                                           const c10d::ScatterOptions &o) override
    {
        auto t = one(outs, "scatter");
        int root = (int)o.rootRank;
        std::vector<at::Tensor> in;
        if (getRank() == root) {
            if (ins.size() != 1 || (int)ins[0].size() != getSize())
                fail("scatter: the root needs one input list of " + std::to_string(getSize()) +
                     " tensors");
            in = ins[0];
            for (auto &x : in)
                same_shape(x, t, "scatter");
        } else if (!ins.empty() && !ins[0].empty()) {
            fail("scatter: only the root passes input tensors");
        }
        return enqueue(OpType::SCATTER, { t }, [this, t, in, root] {
            Dense d(t);
            at::Tensor flat;
            if (!in.empty()) {
                std::vector<at::Tensor> rows;
                for (auto &x : in)
                    rows.push_back(x.reshape({ -1 }));
                flat = at::cat(rows);
            }
            check(coll_, weft_scatter(coll_, in.empty() ? nullptr : flat.data_ptr(), d.ptr(),
                                      nbytes(t), WEFT_U8, root),
                  "scatter");
            d.done();
        });
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outs,
                                                  std::vector<std::vector<at::Tensor>> &ins,
                                                  const c10d::ReduceScatterOptions &o) override
    {
        auto t = one(outs, "reduce_scatter");
        if (ins.size() != 1 || (int)ins[0].size() != getSize())
            fail("reduce_scatter: expected one input list of " + std::to_string(getSize()) +
                 " tensors");
        auto in = ins[0];
        for (auto &x : in)
            same_shape(x, t, "reduce_scatter");
        weft_dtype dt;
        weft_op op;
        reduction_of(t, o.reduceOp, "reduce_scatter", &dt, &op);
        return enqueue(OpType::REDUCE_SCATTER, { t }, [this, t, in, dt, op] {
            Dense d(t);
            std::vector<at::Tensor> rows;
            for (auto &x : in)
                rows.push_back(x.reshape({ -1 }));
            at::Tensor flat = at::cat(rows);
            check(coll_, weft_reduce_scatter(coll_, flat.data_ptr(), d.ptr(), (size_t)t.numel(),
                                             dt, op),
                  "reduce_scatter");
            d.done();
        });
    }

    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
        at::Tensor &out, at::Tensor &in, const c10d::ReduceScatterOptions &o) override
    {
        check_cpu(in, "reduce_scatter_tensor");
        check_cpu(out, "reduce_scatter_tensor");
        if (in.numel() != out.numel() * getSize() || out.scalar_type() != in.scalar_type())
            fail("reduce_scatter_tensor: input must hold world_size times the output's "
                 "elements, of its dtype");
        weft_dtype dt;
        weft_op op;
        reduction_of(out, o.reduceOp, "reduce_scatter_tensor", &dt, &op);
        at::Tensor ot = out, it = in;
        return enqueue(OpType::_REDUCE_SCATTER_BASE, { ot }, [this, ot, it, dt, op] {
            Dense d(ot);
            at::Tensor src = it.contiguous();
            check(coll_, weft_reduce_scatter(coll_, src.data_ptr(), d.ptr(), (size_t)ot.numel(),
                                             dt, op),
                  "reduce_scatter_tensor");
            d.done();
        });
    }

    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &out, at::Tensor &in,
                                                 std::vector<int64_t> &out_splits,
                                                 std::vector<int64_t> &in_splits,
                                                 const c10d::AllToAllOptions &) override
    {
        check_cpu(in, "all_to_all_single");
        check_cpu(out, "all_to_all_single");
        if (in.scalar_type() != out.scalar_type())
            fail("all_to_all_single: input and output dtypes differ");
        size_t p = (size_t)getSize();
        std::vector<size_t> sc(p), sd(p), rc(p), rd(p);
        blocks(in, in_splits, sc, sd, "input");
        blocks(out, out_splits, rc, rd, "output");
        at::Tensor o = out, i = in;
        bool equal = in_splits.empty() && out_splits.empty();
        return enqueue(OpType::ALLTOALL_BASE, { o }, [this, o, i, sc, sd, rc, rd, equal] {
            Dense d(o);
            at::Tensor src = i.contiguous();
            if (equal)
                check(coll_, weft_alltoall(coll_, src.data_ptr(), d.ptr(), sc[0], WEFT_U8),
                      "all_to_all_single");
            else
                check(coll_, weft_alltoallv(coll_, src.data_ptr(), sc.data(), sd.data(), d.ptr(),
                                            rc.data(), rd.data(), WEFT_U8),
                      "all_to_all_single");
            d.done();
        });
    }

    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outs,
                                            std::vector<at::Tensor> &ins,
                                            const c10d::AllToAllOptions &) override
    {
        size_t p = (size_t)getSize();
        if (outs.size() != p || ins.size() != p)
            fail("all_to_all: expected " + std::to_string(p) + " input and output tensors");
        std::vector<size_t> sc(p), sd(p), rc(p), rd(p);
        size_t st = 0, rt = 0;
        for (size_t j = 0; j < p; j++) {
            check_cpu(ins[j], "all_to_all");
            check_cpu(outs[j], "all_to_all");
            sc[j] = nbytes(ins[j]), sd[j] = st, st += sc[j];
            rc[j] = nbytes(outs[j]), rd[j] = rt, rt += rc[j];
        }
        auto o = outs;
        auto i = ins;
        return enqueue(OpType::ALLTOALL, o, [this, o, i, sc, sd, rc, rd, rt] {
            std::vector<at::Tensor> parts;
            for (auto &t : i)
                parts.push_back(t.contiguous().view(at::kByte).reshape({ -1 }));
            at::Tensor send = at::cat(parts);
            at::Tensor recv = at::empty({ (int64_t)rt + 1 }, send.options());
            check(coll_, weft_alltoallv(coll_, send.data_ptr(), sc.data(), sd.data(),
                                        recv.data_ptr(), rc.data(), rd.data(), WEFT_U8),
                  "all_to_all");
            for (size_t j = 0; j < o.size(); j++)
                o[j].view(at::kByte).reshape({ -1 }).copy_(
                    recv.narrow(0, (int64_t)rd[j], (int64_t)rc[j]));
        });
    }

    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override
    {
        return enqueue(OpType::BARRIER, {}, [this] { check(coll_, weft_barrier(coll_), "barrier"); });
    }

    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &ts, int dst, int tag) override
    {
        auto t = one(ts, "send");
        Dense d(t);
        weft_request *r = nullptr;
        {
            std::lock_guard<std::mutex> g(p2p_mu_);
            check(p2p_, weft_isend_tag(p2p_, d.ptr(), nbytes(t), WEFT_U8, dst, tag, &r), "send");
        }
        return c10::make_intrusive<WeftP2PWork>(OpType::SEND, p2p_, r, std::move(d), dst);
    }

    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &ts, int src, int tag) override
    {
        auto t = one(ts, "recv");
        Dense d(t);
        weft_request *r = nullptr;
        {
            std::lock_guard<std::mutex> g(p2p_mu_);
            check(p2p_, weft_irecv_tag(p2p_, d.ptr(), nbytes(t), WEFT_U8, src, tag, &r), "recv");
        }
        return c10::make_intrusive<WeftP2PWork>(OpType::RECV, p2p_, r, std::move(d), src);
    }

    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &, int) override
    {
        fail("recv without a source rank is not supported: weft matches messages by (source, "
             "tag); pass src=");
    }

    // Wall time per call, in microseconds, of iters synchronous sum
    // all-reduces of t (contiguous float32): weft's own call on the group's
    // communicator, or this backend's allreduce and Work::wait, both from
    // C++, so that the backend's share of a call is told apart from
    // Python's (bench/torch_backend.sh). Every rank of the group calls it
    // alike. The weft calls run as one queued job, so that nothing else
    // uses the communicator meanwhile.
    double call_cost(const at::Tensor &t, int iters, bool backend)
    {
        if (!t.device().is_cpu() || t.scalar_type() != at::kFloat || !t.is_contiguous())
            fail("call_cost: a contiguous float32 CPU tensor");
        using clock = std::chrono::steady_clock;
        std::vector<at::Tensor> ts{ t };
        c10d::AllreduceOptions o;
        if (backend) {
            auto t0 = clock::now();
            for (int i = 0; i < iters; i++)
                allreduce(ts, o)->wait(::kNoTimeout);
            return std::chrono::duration<double, std::micro>(clock::now() - t0).count() / iters;
        }
        double us = 0;
        enqueue(OpType::ALLREDUCE, {}, [&] {
            auto t0 = clock::now();
            for (int i = 0; i < iters; i++)
                check(coll_, weft_allreduce(coll_, t.data_ptr(), t.data_ptr(), (size_t)t.numel(),
                                            WEFT_F32, WEFT_SUM),
                      "all_reduce");
            us = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / iters;
        })->wait(::kNoTimeout);
        return us;
    }

  private:
    at::Tensor one(std::vector<at::Tensor> &ts, const char *name)
    {
        if (ts.size() != 1)
            fail(std::string(name) + ": expected one tensor, got " + std::to_string(ts.size()));
        check_cpu(ts[0], name);
        return ts[0];
    }

    static void same_shape(const at::Tensor &a, const at::Tensor &b, const char *name)
    {
        check_cpu(a, name);
        if (a.numel() != b.numel() || a.scalar_type() != b.scalar_type())
            fail(std::string(name) + ": every tensor must have the input's size and dtype");
    }

    // Byte counts and offsets of dim-0 blocks (empty splits: equal ones).
    void blocks(const at::Tensor &t, const std::vector<int64_t> &splits, std::vector<size_t> &n,
                std::vector<size_t> &at, const char *which)
    {
        size_t p = n.size(), rb = row_bytes(t), off = 0;
        if (splits.empty()) {
            if (t.dim() == 0 || t.size(0) % (int64_t)p)
                fail(std::string("all_to_all_single: the ") + which +
                     "'s first dimension must divide by the world size");
            for (size_t j = 0; j < p; j++)
                n[j] = nbytes(t) / p, at[j] = j * n[j];
            return;
        }
        if (splits.size() != p)
            fail(std::string("all_to_all_single: ") + which + " splits need one size per rank");
        for (size_t j = 0; j < p; j++) {
            if (splits[j] < 0)
                fail("all_to_all_single: negative split size");
            n[j] = (size_t)splits[j] * rb, at[j] = off, off += n[j];
        }
        if (off > nbytes(t))
            fail(std::string("all_to_all_single: ") + which + " splits exceed the tensor");
    }

    c10::intrusive_ptr<c10d::Work> enqueue(OpType type, std::vector<at::Tensor> outs,
                                           std::function<void()> fn)
    {
        auto out = c10::make_intrusive<Outcome>(std::move(outs));
        uint64_t seq = queue_->push(std::move(fn), out);
        return c10::make_intrusive<WeftWork>(type, std::move(out), queue_, seq);
    }

    weft_comm *coll_ = nullptr, *p2p_ = nullptr;
    std::mutex p2p_mu_;
    std::shared_ptr<CollQueue> queue_ = std::make_shared<CollQueue>(spin_of_env());
    std::thread worker_;
};

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store> &store,
                                              int rank, int size,
                                              std::chrono::milliseconds timeout)
{
    return c10::make_intrusive<WeftPG>(store, rank, size, timeout);
}

} // namespace

PYBIND11_MODULE(_weft_torch, m)
{
    m.doc() = "torch.distributed backend \"weft\" (register it with `import weft.torch`)";
    m.def("create_process_group", &create, py::arg("store"), py::arg("rank"), py::arg("size"),
          py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
    m.def("version", [] { return std::string(weft_version()); });
    m.def(
        "call_cost",
        [](const c10::intrusive_ptr<c10d::ProcessGroup> &pg, const at::Tensor &t, int iters,
           bool backend) {
            auto *w = dynamic_cast<WeftPG *>(pg.get());
            if (!w)
                fail("call_cost: not a weft process group");
            if (iters < 1)
                fail("call_cost: iters must be positive");
            return w->call_cost(t, iters, backend);
        },
        "microseconds per synchronous float32 sum all_reduce of t, from C++: weft's own "
        "call (backend=False) or through the backend's Work (backend=True)",
        py::arg("group"), py::arg("tensor"), py::arg("iters"), py::arg("backend"),
        py::call_guard<py::gil_scoped_release>());
}
