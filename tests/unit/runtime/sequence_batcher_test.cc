// SequenceBatcher on its own: which requests make up each batch (slot positions and null
// requests for direct, oldest-first for oldest), the backlog past the slots, the state a
// request's output hands the next one (charged to the sequence's ledger owner), idle-out, and
// a shutdown that runs what was accepted. RunBatch is a fake that records each batch and
// answers every request, optionally held open by the test.
#include "runtime/sequence_batcher.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>

#include "memory/allocator.h"
#include "memory/ledger.h"

namespace vramd::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using std::chrono::milliseconds;

config::ModelConfig SequenceConfig(int max_batch_size, const std::string& extra) {
  config::ModelConfig config;
  config.set_name("m");
  config.set_max_batch_size(max_batch_size);
  auto* input = config.add_input();
  input->set_name("X");
  input->set_data_type(config::TYPE_INT32);
  input->add_dims(1);
  auto* seq = config.mutable_sequence_batching();
  auto add_flag = [&](const char* name, config::ModelSequenceBatching::Control::Kind kind) {
    auto* control = seq->add_control_input();
    control->set_name(name);
    auto* c = control->add_control();
    c->set_kind(kind);
    c->add_int32_false_true(0);
    c->add_int32_false_true(1);
  };
  add_flag("START", config::ModelSequenceBatching::Control::CONTROL_SEQUENCE_START);
  add_flag("READY", config::ModelSequenceBatching::Control::CONTROL_SEQUENCE_READY);
  auto* corrid = seq->add_control_input();
  corrid->set_name("CORRID");
  corrid->add_control()->set_kind(config::ModelSequenceBatching::Control::CONTROL_SEQUENCE_CORRID);
  corrid->mutable_control(0)->set_data_type(config::TYPE_UINT64);
  if (extra == "state") {
    auto* state = seq->add_state();
    state->set_input_name("S_IN");
    state->set_output_name("S_OUT");
    state->set_data_type(config::TYPE_INT32);
    state->add_dims(1);
  }
  return config;
}

int32_t Int(const Tensor& t) {
  int32_t v;
  std::memcpy(&v, t.data.data(), sizeof(v));
  return v;
}

uint64_t U64(const Tensor& t) {
  uint64_t v;
  std::memcpy(&v, t.data.data(), sizeof(v));
  return v;
}

class SequenceBatcherTest : public ::testing::Test {
 protected:
  struct Seen {
    bool null_request;
    int32_t x, start, ready;
    uint64_t corrid;
    std::optional<int32_t> state;
    Shape state_shape;
  };

  void Start(const config::ModelConfig& config, size_t instances, bool request_lists = false,
             std::chrono::microseconds idle = std::chrono::seconds(30)) {
    batching_ = config.max_batch_size() > 0;
    auto controls = SequenceControls::From(config, "/nonexistent");
    ASSERT_TRUE(controls.ok()) << controls.status().ToString();
    auto options = SequenceBatcher::Options::From(config, "model 'm' version 1", instances,
                                                  request_lists);
    options.idle_timeout = idle;
    version_ = ledger_.OpenOwner(ledger_.root(), memory::OwnerKind::kVersion, "1");
    std::vector<memory::OwnerId> owners;
    for (size_t i = 0; i < instances; ++i) {
      owners.push_back(
          ledger_.OpenOwner(version_, memory::OwnerKind::kInstance, fmt::format("i{}", i)));
    }
    MemoryContext memory;
    memory.ledger = &ledger_;
    memory.allocator = &allocator_;
    batcher_ = std::make_unique<SequenceBatcher>(
        options, std::move(controls).value(), memory, owners,
        [this](size_t, std::vector<QueuedRequest> batch) { Run(std::move(batch)); }, &stats_);
  }

  void TearDown() override {
    Release();
    if (batcher_) batcher_->Shutdown();
  }

  // Answers each request with OUT = X (+ S_OUT = S_IN + X where the request has a state).
  void Run(std::vector<QueuedRequest> batch) {
    std::vector<Seen> seen;
    for (auto& q : batch) {
      const InferRequest& r = *q.request;
      Seen s{q.null_request, Int(*r.FindInput("X")), Int(*r.FindInput("START")),
             Int(*r.FindInput("READY")), U64(*r.FindInput("CORRID")), std::nullopt, {}};
      if (const Tensor* state = r.FindInput("S_IN")) {
        s.state = Int(*state);
        s.state_shape = state->shape;
      }
      seen.push_back(s);
    }
    {
      std::unique_lock lock(mu_);
      batches_.push_back(seen);
      changed_.notify_all();
      if (hold_) changed_.wait(lock, [this] { return !hold_; });
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      InferOutcome outcome;
      const int32_t x = seen[i].x;
      outcome.response.outputs.push_back(Tensor{"OUT", DataType::kInt32,
                                                batch[i].request->FindInput("X")->shape,
                                                SharedBuffer::CopyOf(&x, 4), kOnHost});
      if (seen[i].state) {
        const int32_t next = *seen[i].state + x;
        outcome.response.outputs.push_back(
            Tensor{"S_OUT", DataType::kInt32, seen[i].state_shape, SharedBuffer::CopyOf(&next, 4),
                   kOnHost});
      }
      batch[i].done(std::move(outcome));
    }
  }

  struct Answer {
    Status status;
    std::vector<Tensor> outputs;
  };

  // Submits x for sequence `id`; the answer lands in answers_[tag].
  void Submit(uint64_t id, int32_t x, uint32_t flags, int tag, int batch_size = 1) {
    auto request = std::make_shared<InferRequest>();
    request->correlation_id = id;
    request->flags = flags;
    request->inputs.push_back(Tensor{"X", DataType::kInt32, batching_ ? Shape{1, 1} : Shape{1},
                                     SharedBuffer::CopyOf(&x, 4), kOnHost});
    QueuedRequest q;
    q.request = request;
    q.batch_size = batch_size;
    q.arrival = SchedulerClock::now();
    q.done = [this, tag](Result<InferOutcome> outcome) {
      std::lock_guard lock(mu_);
      Answer a;
      if (outcome.ok()) {
        a.outputs = outcome->response.outputs;
      } else {
        a.status = outcome.status();
      }
      answers_[tag] = a;
      changed_.notify_all();
    };
    batcher_->Submit(std::move(q));
  }

  Answer WaitAnswer(int tag) {
    std::unique_lock lock(mu_);
    EXPECT_TRUE(changed_.wait_for(lock, milliseconds(5000), [&] { return answers_.count(tag); }))
        << "no answer for " << tag;
    return answers_.count(tag) ? answers_[tag] : Answer{Status::Internal("none"), {}};
  }

  bool Answered(int tag) {
    std::lock_guard lock(mu_);
    return answers_.count(tag) != 0;
  }

  void WaitBatches(size_t n) {
    std::unique_lock lock(mu_);
    ASSERT_TRUE(changed_.wait_for(lock, milliseconds(5000), [&] { return batches_.size() >= n; }))
        << "only " << batches_.size() << " batch(es)";
  }

  void Hold() {
    std::lock_guard lock(mu_);
    hold_ = true;
  }
  void Release() {
    std::lock_guard lock(mu_);
    hold_ = false;
    changed_.notify_all();
  }

  std::vector<memory::OwnerSnapshot> Sequences() {
    std::vector<memory::OwnerSnapshot> found;
    for (const auto& o : ledger_.Snapshot()) {
      if (o.kind == memory::OwnerKind::kSequence && !o.closed) found.push_back(o);
    }
    return found;
  }

  memory::Ledger ledger_;
  memory::Allocator allocator_{&ledger_};
  memory::OwnerId version_ = memory::kNoOwner;
  InferenceStatistics stats_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::vector<Seen>> batches_;
  std::map<int, Answer> answers_;
  bool hold_ = false;
  bool batching_ = false;
  std::unique_ptr<SequenceBatcher> batcher_;
};

constexpr uint32_t kStart = kRequestFlagSequenceStart;
constexpr uint32_t kEnd = kRequestFlagSequenceEnd;

TEST_F(SequenceBatcherTest, DirectKeepsEachSequenceAtItsSlotAndFillsGapsWithNullRequests) {
  Start(SequenceConfig(4, ""), 1);
  Hold();
  Submit(1, 10, kStart, 0);  // slot 0, held
  WaitBatches(1);
  Submit(2, 20, kStart, 1);  // slot 1
  Submit(3, 30, kStart, 2);  // slot 2
  Release();
  WaitAnswer(1);
  WaitAnswer(2);
  Hold();
  Submit(1, 11, 0, 3);  // slot 0, held again
  WaitBatches(3);
  Submit(3, 31, 0, 4);  // slot 2 only: slot 1 has no request
  Release();
  WaitAnswer(4);
  std::lock_guard lock(mu_);
  ASSERT_EQ(batches_.size(), 4u);
  // The second batch: sequences 2 and 3 at positions 1 and 2, a null request at 0.
  const auto& second = batches_[1];
  ASSERT_EQ(second.size(), 3u);
  EXPECT_TRUE(second[0].null_request);
  EXPECT_EQ(second[0].ready, 0);
  EXPECT_EQ(second[0].corrid, 0u);
  EXPECT_EQ(second[1].corrid, 2u);
  EXPECT_EQ(second[1].ready, 1);
  EXPECT_EQ(second[1].start, 1);
  EXPECT_EQ(second[2].corrid, 3u);
  // The fourth: sequence 3 alone at slot 2, nulls at 0 and 1.
  const auto& fourth = batches_[3];
  ASSERT_EQ(fourth.size(), 3u);
  EXPECT_TRUE(fourth[0].null_request && fourth[1].null_request);
  EXPECT_EQ(fourth[2].corrid, 3u);
  EXPECT_EQ(fourth[2].x, 31);
  EXPECT_EQ(fourth[2].start, 0);
}

TEST_F(SequenceBatcherTest, RequestListsGetNoNullRequests) {
  Start(SequenceConfig(4, ""), 1, /*request_lists=*/true);
  Hold();
  Submit(1, 10, kStart, 0);
  WaitBatches(1);
  Submit(2, 20, kStart, 1);
  Submit(3, 30, kStart, 2);
  Release();
  WaitAnswer(2);
  std::lock_guard lock(mu_);
  ASSERT_EQ(batches_.size(), 2u);
  ASSERT_EQ(batches_[1].size(), 2u);
  EXPECT_EQ(batches_[1][0].corrid, 2u);
  EXPECT_EQ(batches_[1][1].corrid, 3u);
}

TEST_F(SequenceBatcherTest, ASequenceRunsOneRequestAtATimeInOrder) {
  Start(SequenceConfig(4, "state"), 2);
  for (int i = 0; i < 20; ++i) Submit(7, i, i == 0 ? kStart : (i == 19 ? kEnd : 0), i);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(WaitAnswer(i).status.ok()) << i;
  std::lock_guard lock(mu_);
  std::vector<int32_t> order;
  int32_t expected_state = 0;
  for (const auto& batch : batches_) {
    ASSERT_EQ(batch.size(), 1u) << "one sequence never has two requests in one batch";
    order.push_back(batch[0].x);
    ASSERT_TRUE(batch[0].state.has_value());
    EXPECT_EQ(*batch[0].state, expected_state) << "the state the previous request left";
    expected_state += batch[0].x;
  }
  std::vector<int32_t> sent(20);
  for (int i = 0; i < 20; ++i) sent[i] = i;
  EXPECT_EQ(order, sent);
}

TEST_F(SequenceBatcherTest, StateIsChargedToTheSequenceAndLeavesTheResponse) {
  Start(SequenceConfig(0, "state"), 1);
  Submit(5, 3, kStart, 0);
  Answer a = WaitAnswer(0);
  ASSERT_TRUE(a.status.ok()) << a.status.ToString();
  ASSERT_EQ(a.outputs.size(), 1u);
  EXPECT_EQ(a.outputs[0].name, "OUT");  // S_OUT is the server's
  auto live = Sequences();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].name, "sequence 5");
  EXPECT_EQ(live[0].self.live_bytes, 4);
  EXPECT_EQ(ledger_.OwnerPath(live[0].parent), "server/version:1/instance:i0");
  Submit(5, 4, kEnd, 1);
  ASSERT_TRUE(WaitAnswer(1).status.ok());
  // Ended: released, its state freed and its owner closed, with no leak.
  const auto start = std::chrono::steady_clock::now();
  while (!Sequences().empty() && std::chrono::steady_clock::now() - start < milliseconds(5000)) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_TRUE(Sequences().empty());
  EXPECT_TRUE(ledger_.Leaks().empty());
  std::lock_guard lock(mu_);
  EXPECT_EQ(*batches_[1][0].state, 3);
}

TEST_F(SequenceBatcherTest, AStartPastEverySlotWaitsInTheBacklogUntilOneFrees) {
  Start(SequenceConfig(0, ""), 1);  // one instance, one slot
  Submit(1, 1, kStart, 0);
  ASSERT_TRUE(WaitAnswer(0).status.ok());
  Submit(2, 2, kStart, 1);
  Submit(3, 3, kStart, 2);
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(Answered(1));
  EXPECT_EQ(batcher_->counts().backlogged, 2u);
  Submit(1, 1, kEnd, 3);
  ASSERT_TRUE(WaitAnswer(3).status.ok());
  ASSERT_TRUE(WaitAnswer(1).status.ok());  // sequence 2 took the slot, first in line
  EXPECT_FALSE(Answered(2));
  Submit(2, 2, kEnd, 4);
  ASSERT_TRUE(WaitAnswer(2).status.ok());
  std::lock_guard lock(mu_);
  std::vector<uint64_t> order;
  for (const auto& batch : batches_) order.push_back(batch[0].corrid);
  EXPECT_THAT(order, ElementsAre(1u, 1u, 2u, 2u, 3u));
}

TEST_F(SequenceBatcherTest, OldestBatchesTheOldestRequestsAcrossSequences) {
  auto config = SequenceConfig(2, "");
  config.mutable_sequence_batching()->mutable_oldest()->set_max_candidate_sequences(4);
  Start(config, 1);
  Hold();
  Submit(1, 1, kStart, 0);
  WaitBatches(1);
  Submit(2, 2, kStart, 1);
  Submit(3, 3, kStart, 2);
  Submit(4, 4, kStart, 3);
  Release();
  for (int i = 0; i < 4; ++i) WaitAnswer(i);
  std::lock_guard lock(mu_);
  ASSERT_EQ(batches_.size(), 3u);
  // max_batch_size 2, oldest first, no null requests.
  ASSERT_EQ(batches_[1].size(), 2u);
  EXPECT_EQ(batches_[1][0].corrid, 2u);
  EXPECT_EQ(batches_[1][1].corrid, 3u);
  ASSERT_EQ(batches_[2].size(), 1u);
  EXPECT_EQ(batches_[2][0].corrid, 4u);
}

TEST_F(SequenceBatcherTest, AnIdleSequenceIsReleasedAndMustStartAgain) {
  Start(SequenceConfig(0, "state"), 1, false, std::chrono::milliseconds(30));
  Submit(9, 1, kStart, 0);
  ASSERT_TRUE(WaitAnswer(0).status.ok());
  ASSERT_EQ(Sequences().size(), 1u);
  const auto start = std::chrono::steady_clock::now();
  // Counted when the slot frees; the owner closes just after, off the batcher's lock.
  while ((batcher_->counts().idle_timeouts == 0 || !Sequences().empty()) &&
         std::chrono::steady_clock::now() - start < milliseconds(5000)) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(batcher_->counts().idle_timeouts, 1u);
  EXPECT_EQ(batcher_->counts().live, 0u);
  EXPECT_TRUE(Sequences().empty());
  EXPECT_TRUE(ledger_.Leaks().empty());
  Submit(9, 1, 0, 1);
  Answer a = WaitAnswer(1);
  EXPECT_EQ(a.status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status.message(), HasSubstr("must specify the START flag"));
}

TEST_F(SequenceBatcherTest, RefusesRequestsWithoutIdStartOrBatchOne) {
  Start(SequenceConfig(4, ""), 1);
  Submit(0, 1, kStart, 0);
  EXPECT_EQ(WaitAnswer(0).status.message(),
            "inference request to model 'm' must specify a non-zero or non-empty correlation ID");
  Submit(4, 1, 0, 1);
  EXPECT_EQ(WaitAnswer(1).status.message(),
            "inference request for sequence 4 to model 'm' must specify the START flag on the "
            "first request of the sequence");
  Submit(4, 1, kStart, 2, /*batch_size=*/2);
  EXPECT_EQ(WaitAnswer(2).status.message(),
            "inference request to model 'm' must specify batch-size 1 due to requirements of "
            "sequence batcher");
  EXPECT_EQ(stats_.Snapshot().fail.count, 3u);
}

TEST_F(SequenceBatcherTest, ShutdownRunsWhatWasAcceptedIncludingTheBacklog) {
  Start(SequenceConfig(0, "state"), 1);
  Hold();
  Submit(1, 1, kStart, 0);
  WaitBatches(1);
  Submit(1, 2, 0, 1);
  Submit(2, 5, kStart, 2);  // backlogged behind sequence 1, which never ends
  std::thread stopper([this] { batcher_->Shutdown(); });
  std::this_thread::sleep_for(milliseconds(20));
  Release();
  stopper.join();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(WaitAnswer(i).status.ok()) << i;
  EXPECT_TRUE(Sequences().empty());
  EXPECT_TRUE(ledger_.Leaks().empty());
  Submit(3, 1, kStart, 3);
  EXPECT_EQ(WaitAnswer(3).status.code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace vramd::runtime

namespace vramd::runtime {
namespace {

// Every kind of control value, as each Control list and CORRID type gives it.
TEST(SequenceControlsTest, EachControlKindCarriesItsTypeValuesAndShape) {
  using Control = config::ModelSequenceBatching::Control;
  auto make = [](int max_batch_size, config::DataType corrid_type) {
    config::ModelConfig config;
    config.set_name("m");
    config.set_max_batch_size(max_batch_size);
    auto* seq = config.mutable_sequence_batching();
    auto* start = seq->add_control_input();
    start->set_name("S");
    auto* s = start->add_control();
    s->set_kind(Control::CONTROL_SEQUENCE_START);
    s->add_bool_false_true(false);
    s->add_bool_false_true(true);
    auto* end = seq->add_control_input();
    end->set_name("E");
    auto* e = end->add_control();
    e->set_kind(Control::CONTROL_SEQUENCE_END);
    e->add_fp32_false_true(-1.0f);  // any two values: what the model wants
    e->add_fp32_false_true(2.5f);
    auto* ready = seq->add_control_input();
    ready->set_name("R");
    auto* r = ready->add_control();
    r->set_kind(Control::CONTROL_SEQUENCE_READY);
    r->add_int32_false_true(7);
    r->add_int32_false_true(9);
    auto* corrid = seq->add_control_input();
    corrid->set_name("C");
    auto* c = corrid->add_control();
    c->set_kind(Control::CONTROL_SEQUENCE_CORRID);
    c->set_data_type(corrid_type);
    auto controls = SequenceControls::From(config, "/nonexistent");
    EXPECT_TRUE(controls.ok()) << controls.status().ToString();
    return std::move(controls).value();
  };
  auto find = [](const std::vector<Tensor>& ts, const std::string& name) {
    for (const Tensor& t : ts)
      if (t.name == name) return t;
    ADD_FAILURE() << "no " << name;
    return Tensor{};
  };

  SequenceSignals signals;
  signals.start = true;
  signals.end = false;
  signals.ready = true;
  signals.correlation_id = (uint64_t{5} << 32) | 3;  // a 32-bit CORRID keeps the low bits
  std::vector<Tensor> inputs;
  make(4, config::TYPE_UINT32).AddControls(signals, &inputs);
  ASSERT_EQ(inputs.size(), 4u);
  const Tensor s = find(inputs, "S"), e = find(inputs, "E"), r = find(inputs, "R"),
               c = find(inputs, "C");
  EXPECT_EQ(s.datatype, DataType::kBool);
  EXPECT_EQ(s.shape, (Shape{1, 1}));  // batching: [1, 1] per request
  EXPECT_EQ(static_cast<uint8_t>(s.data.data()[0]), 1);
  EXPECT_EQ(e.datatype, DataType::kFp32);
  float end_value;
  std::memcpy(&end_value, e.data.data(), 4);
  EXPECT_EQ(end_value, -1.0f);
  EXPECT_EQ(r.datatype, DataType::kInt32);
  EXPECT_EQ(Int(r), 9);
  EXPECT_EQ(c.datatype, DataType::kUint32);
  ASSERT_EQ(c.data.size(), 4u);
  EXPECT_EQ(Int(c), 3);

  inputs.clear();
  signals.correlation_id = 0;
  signals.correlation_id_string = "abc";
  signals.ready = false;
  make(0, config::TYPE_STRING).AddControls(signals, &inputs);
  const Tensor text = find(inputs, "C");
  EXPECT_EQ(text.datatype, DataType::kBytes);
  EXPECT_EQ(text.shape, (Shape{1}));  // no batching: [1]
  EXPECT_EQ(text.data.view(), std::string("\x03\x00\x00\x00" "abc", 7));
  EXPECT_EQ(Int(find(inputs, "R")), 7);

  inputs.clear();
  signals.correlation_id = 1ull << 40;
  make(0, config::TYPE_INT64).AddControls(signals, &inputs);
  EXPECT_EQ(find(inputs, "C").datatype, DataType::kInt64);
  EXPECT_EQ(U64(find(inputs, "C")), 1ull << 40);
}

TEST(SequenceControlsTest, InitialStateFromADataFileMustHaveTheStatesSize) {
  config::ModelConfig config;
  config.set_name("m");
  config.set_max_batch_size(2);
  auto* state = config.mutable_sequence_batching()->add_state();
  state->set_input_name("I");
  state->set_output_name("O");
  state->set_data_type(config::TYPE_INT32);
  state->add_dims(2);
  auto* initial = state->add_initial_state();
  initial->set_name("init");
  initial->set_data_type(config::TYPE_INT32);
  initial->add_dims(2);
  initial->set_data_file("values");
  const auto dir = std::filesystem::temp_directory_path() /
                   ("vramd_seq_state_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "initial_state");
  {
    std::ofstream out(dir / "initial_state" / "values", std::ios::binary);
    const int32_t values[2] = {11, 22};
    out.write(reinterpret_cast<const char*>(values), sizeof(values));
  }
  auto controls = SequenceControls::From(config, dir);
  ASSERT_TRUE(controls.ok()) << controls.status().ToString();
  ASSERT_EQ(controls->states().size(), 1u);
  const Tensor& init = controls->states()[0].initial;
  EXPECT_EQ(init.shape, (Shape{1, 2}));
  EXPECT_EQ(Int(init), 11);
  {
    std::ofstream out(dir / "initial_state" / "values", std::ios::binary);
    out.write("abc", 3);
  }
  auto wrong = SequenceControls::From(config, dir);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(), HasSubstr("has 3 bytes; a TYPE_INT32 state of shape [1,2] has 8"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vramd::runtime
