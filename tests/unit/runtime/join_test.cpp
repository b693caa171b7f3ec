// Joins: a stage with several inputs gets matched sets; late inputs still
// match, missing ones make partial sets at the deadline (or are dropped when
// the stage says so), and every outcome is counted.

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include <swarmflow/runtime.hpp>
#include <swarmflow/schema/blob_generated.h>

namespace swarmflow {
namespace {

struct Seen {
  bool a = false;
  bool b = false;
  bool partial = false;
};

/// Records which ports each joined step had.
class PairRecorder : public Stage {
 public:
  static std::mutex mutex;
  static std::map<std::uint64_t, Seen> seen;
  void setup(StageSpec& s) override {
    a_ = s.input<schema::Blob>("a");
    b_ = s.input<schema::Blob>("b");
  }
  Status process(Inputs& in, Outputs&, StageContext&) override {
    std::lock_guard<std::mutex> lock(mutex);
    const std::uint64_t seq = in.envelope()->header().seq;
    Seen& s = seen[seq];
    s.a = in.get(a_) != nullptr;
    s.b = in.get(b_) != nullptr;
    s.partial = in.partial();
    return {};
  }

 protected:
  InputPort<schema::Blob> a_;
  InputPort<schema::Blob> b_;
};
std::mutex PairRecorder::mutex;
std::map<std::uint64_t, Seen> PairRecorder::seen;

class StrictPairRecorder final : public PairRecorder {
 public:
  void setup(StageSpec& s) override {
    PairRecorder::setup(s);
    s.drop_partial_joins();
  }
};

std::int64_t counter(const StageReport* s, const std::string& name) {
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

std::string join_pipeline(const std::string& type) {
  // `b` is late (20 ms per envelope) and short of two envelopes (seq 8 and 9).
  return "pipeline: join\nstages:\n"
         "  - {id: left, type: sim.source, params: {count: 10}}\n"
         "  - {id: right, type: sim.source, params: {count: 8}}\n"
         "  - {id: slow, type: sim.work, inputs: {in: right/out}, params: {service_us: 20000}}\n"
         "  - {id: pair, type: " + type + ", inputs: {a: left/out, b: slow/out},\n"
         "     join: {key: seq, timeout_ms: 5000}}\n";
}

TEST(Join, LateInputStillMatchesAndMissingOneMakesAPartialSet) {
  PairRecorder::seen.clear();
  Runtime rt;
  ASSERT_TRUE(rt.registry().add<PairRecorder>("test.pair", "records joined sets").ok());
  std::vector<Diagnostic> diags;
  ASSERT_TRUE(rt.load_string(join_pipeline("test.pair"), "join.yaml", &diags).ok()) << format_diagnostics(diags);
  ASSERT_TRUE(rt.run().ok());
  ASSERT_EQ(PairRecorder::seen.size(), 10U);
  for (std::uint64_t seq = 0; seq < 8; ++seq) {
    const Seen& s = PairRecorder::seen[seq];
    EXPECT_TRUE(s.a && s.b && !s.partial) << "seq " << seq;
  }
  for (std::uint64_t seq = 8; seq < 10; ++seq) {
    const Seen& s = PairRecorder::seen[seq];
    EXPECT_TRUE(s.a && !s.b && s.partial) << "seq " << seq;
  }
  RunReport r = rt.report();
  EXPECT_EQ(counter(r.stage("pair"), "join_complete"), 8);
  EXPECT_EQ(counter(r.stage("pair"), "join_partial"), 2);
  EXPECT_EQ(r.stage("pair")->processed, 10U);
}

TEST(Join, StageCanDropPartialSetsAndTheyAreCounted) {
  PairRecorder::seen.clear();
  Runtime rt;
  ASSERT_TRUE(rt.registry().add<StrictPairRecorder>("test.strict_pair", "drops partial sets").ok());
  ASSERT_TRUE(rt.load_string(join_pipeline("test.strict_pair"), "join.yaml").ok());
  ASSERT_TRUE(rt.run().ok());
  EXPECT_EQ(PairRecorder::seen.size(), 8U);
  RunReport r = rt.report();
  EXPECT_EQ(counter(r.stage("pair"), "join_complete"), 8);
  EXPECT_EQ(counter(r.stage("pair"), "join_dropped"), 2);
  EXPECT_EQ(counter(r.stage("pair"), "join_partial"), 0);
}

TEST(Join, FanInListAndKeyByPartIdLoad) {
  Runtime rt;
  std::vector<Diagnostic> diags;
  Status s = rt.load_string("pipeline: fan\nstages:\n"
                            "  - {id: a, type: sim.source}\n"
                            "  - {id: b, type: sim.source}\n"
                            "  - {id: w, type: sim.work, key: part_id, inputs: {in: [a/out, b/out]}}\n"
                            "  - {id: s, type: sim.sink, inputs: {in: w/out}}\n",
                            "fan.yaml", &diags);
  ASSERT_TRUE(s.ok()) << format_diagnostics(diags);
  ASSERT_TRUE(rt.run().ok());
  RunReport r = rt.report();
  EXPECT_EQ(r.stage("w")->processed, 2000U);  // 1000 from each source into one port
  EXPECT_EQ(r.edges.size(), 3U);
}

TEST(Join, JoinNeedsTwoInputs) {
  Runtime rt;
  std::vector<Diagnostic> diags;
  Status s = rt.load_string("pipeline: j\nstages:\n"
                            "  - {id: a, type: sim.source}\n"
                            "  - {id: w, type: sim.sink, inputs: {in: a/out}, join: {key: seq}}\n",
                            "j.yaml", &diags);
  EXPECT_FALSE(s.ok());
  ASSERT_EQ(diags.size(), 1U);
  EXPECT_EQ(diags[0].line, 4);
}

}  // namespace
}  // namespace swarmflow
