#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/schema/control_generated.h>
#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/tokens_generated.h>
#include <swarmflow/schema/vision_generated.h>

#include "io/io.hpp"
#include "io/payload_json.hpp"
#include "support/stage_runner.hpp"

namespace swarmflow {
namespace {

using nlohmann::json;
using testing::StageRunner;

// -- payloads ---------------------------------------------------------------

PayloadPtr make_blob(std::uint64_t stream, std::uint64_t seq, std::size_t bytes) {
  flatbuffers::FlatBufferBuilder fbb;
  std::uint8_t* data = nullptr;
  auto v = fbb.CreateUninitializedVector(bytes, &data);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>(i);
  fbb.Finish(schema::CreateBlob(fbb, stream, seq, v), schema::BlobIdentifier());
  return Payload::from_builder(fbb);
}

PayloadPtr make_frame(std::uint32_t width, std::uint32_t height) {
  flatbuffers::FlatBufferBuilder fbb;
  std::uint8_t* pixels = nullptr;
  auto v = fbb.CreateUninitializedVector(std::size_t{width} * height, &pixels);
  for (std::size_t i = 0; i < std::size_t{width} * height; ++i) pixels[i] = 7;
  auto camera = fbb.CreateString("cam0");
  schema::FrameBuilder b(fbb);
  b.add_format(schema::PixelFormat::GRAY8);
  b.add_width(width);
  b.add_height(height);
  b.add_stride(width);
  b.add_camera_id(camera);
  b.add_frame_index(12);
  b.add_pixels(v);
  fbb.Finish(b.Finish(), schema::FrameIdentifier());
  return Payload::from_builder(fbb);
}

PayloadPtr make_tokens() {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<std::int32_t> ids = {101, 2023};
  const std::vector<flatbuffers::Offset<flatbuffers::String>> pieces = {fbb.CreateString("hello"),
                                                                       fbb.CreateString(" world")};
  const std::vector<float> confidence = {0.5F, 0.25F};
  fbb.Finish(schema::CreateTokensDirect(fbb, &ids, &pieces, 10, &confidence, true),
             schema::TokensIdentifier());
  return Payload::from_builder(fbb);
}

PayloadPtr make_vision(float score) {
  flatbuffers::FlatBufferBuilder fbb;
  const schema::Box box(1, 2, 30, 40);
  std::vector<flatbuffers::Offset<schema::Defect>> defects = {
      schema::CreateDefectDirect(fbb, "scratch", &box, score)};
  std::vector<flatbuffers::Offset<schema::Measurement>> measurements = {
      schema::CreateMeasurementDirect(fbb, "hole_diameter", 5.02, "mm", 5.0, 0.05, true)};
  fbb.Finish(schema::CreateVisionResultsDirect(fbb, "cam0", 12, 77, &defects, &measurements, false),
             schema::VisionResultsIdentifier());
  return Payload::from_builder(fbb);
}

PayloadPtr make_control() {
  flatbuffers::FlatBufferBuilder fbb;
  auto order = schema::CreatePlacementOrderDirect(fbb, 3, schema::PlacementAction::Move, "detect", 1,
                                                  "unit-a", "unit-b");
  fbb.Finish(schema::CreateControl(fbb, schema::ControlBody::PlacementOrder, order.Union()),
             schema::ControlIdentifier());
  return Payload::from_builder(fbb);
}

// A buffer whose identifier no schema declares.
PayloadPtr make_unknown() {
  std::vector<std::uint8_t> bytes(24, 0);
  bytes[0] = 8;
  const char id[] = "ZZZZ";
  for (int i = 0; i < 4; ++i) bytes[4 + i] = static_cast<std::uint8_t>(id[i]);
  return Payload::adopt(std::move(bytes));
}

Envelope envelope(PayloadPtr payload, std::uint64_t stream = 1, std::uint64_t seq = 0) {
  EnvelopeHeader h;
  h.stream = stream;
  h.seq = seq;
  h.capture_ns = 123456789;
  h.confidence = 0.75F;
  h.vote_key = 99;
  return Envelope(h, std::move(payload));
}

// -- files ------------------------------------------------------------------

class TempFile {
 public:
  TempFile() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (std::filesystem::temp_directory_path() /
             (std::string("swarmflow_") + info->name() + "_" + std::to_string(::getpid()) + ".jsonl"))
                .string();
    std::filesystem::remove(path_);
  }
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const { return path_; }

  std::vector<std::string> lines() const {
    std::ifstream in(path_);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

  std::vector<json> records() const {
    std::vector<json> out;
    for (const std::string& line : lines()) out.push_back(json::parse(line));
    return out;
  }

 private:
  std::string path_;
};

Registry io_registry() {
  Registry r;
  register_io_stages(r);
  return r;
}

std::unique_ptr<StageRunner> jsonl_runner(const std::string& path) {
  auto runner = std::make_unique<StageRunner>(io_registry(), "io.jsonl", "dump");
  EXPECT_TRUE(runner->set("path", ParamValue(path)).ok());
  return runner;
}

// -- io.jsonl ---------------------------------------------------------------

TEST(JsonlStage, DeclaresAnyPayloadInputAndItsParameters) {
  const Registry registry = io_registry();
  StageSpec spec;
  ASSERT_TRUE(registry.describe("io.jsonl", spec).ok());
  ASSERT_EQ(spec.inputs().size(), 1U);
  EXPECT_EQ(spec.inputs()[0].name, "in");
  EXPECT_EQ(spec.inputs()[0].type, "*");
  EXPECT_TRUE(spec.outputs().empty());

  const ParamInfo* path = spec.find_param("path");
  ASSERT_NE(path, nullptr);
  EXPECT_EQ(std::get<std::string>(path->default_value), "-");
  const ParamInfo* max_bytes = spec.find_param("max_payload_bytes");
  ASSERT_NE(max_bytes, nullptr);
  EXPECT_EQ(max_bytes->kind, ParamKind::integer);
  EXPECT_EQ(std::get<std::int64_t>(max_bytes->default_value), 1048576);
  const ParamInfo* flush = spec.find_param("flush");
  ASSERT_NE(flush, nullptr);
  EXPECT_EQ(std::get<bool>(flush->default_value), false);
  EXPECT_FALSE(spec.set("max_payload_bytes", ParamValue(std::int64_t{-1})).ok());
}

TEST(JsonlStage, WritesEveryPayloadTypeAsOneJsonLine) {
  TempFile file;
  auto runner = jsonl_runner(file.path());
  ASSERT_TRUE(runner->start().ok());
  ASSERT_TRUE(runner->feed("in", envelope(make_blob(3, 42, 16), 3, 42)).ok());
  ASSERT_TRUE(runner->feed("in", envelope(make_frame(32, 24))).ok());
  ASSERT_TRUE(runner->feed("in", envelope(make_tokens())).ok());
  ASSERT_TRUE(runner->feed("in", envelope(make_vision(0.875F))).ok());
  ASSERT_TRUE(runner->feed("in", envelope(make_control())).ok());
  runner->stop();

  const std::vector<json> records = file.records();
  ASSERT_EQ(records.size(), 5U);

  const json& blob = records[0];
  EXPECT_EQ(blob.at("stream"), 3);
  EXPECT_EQ(blob.at("seq"), 42);
  EXPECT_EQ(blob.at("capture_ns"), 123456789);
  EXPECT_DOUBLE_EQ(blob.at("confidence").get<double>(), 0.75);
  EXPECT_EQ(blob.at("vote_key"), 99);
  EXPECT_EQ(blob.at("type"), "SFBL");
  EXPECT_EQ(blob.at("payload").at("seq"), 42);
  EXPECT_EQ(blob.at("payload").at("stream"), 3);
  ASSERT_EQ(blob.at("payload").at("data").size(), 16U);
  EXPECT_EQ(blob.at("payload").at("data")[15], 15);

  const json& frame = records[1];
  EXPECT_EQ(frame.at("type"), "SFFR");
  EXPECT_EQ(frame.at("payload").at("width"), 32);
  EXPECT_EQ(frame.at("payload").at("height"), 24);
  EXPECT_EQ(frame.at("payload").at("format"), "GRAY8");
  EXPECT_EQ(frame.at("payload").at("camera_id"), "cam0");
  EXPECT_EQ(frame.at("payload").at("pixels").size(), 32U * 24U);

  const json& tokens = records[2];
  EXPECT_EQ(tokens.at("type"), "SFTK");
  EXPECT_EQ(tokens.at("payload").at("pieces"), json::array({"hello", " world"}));
  EXPECT_EQ(tokens.at("payload").at("ids"), json::array({101, 2023}));
  EXPECT_EQ(tokens.at("payload").at("position"), 10);
  EXPECT_EQ(tokens.at("payload").at("final"), true);

  const json& vision = records[3];
  EXPECT_EQ(vision.at("type"), "SFVR");
  const json& defect = vision.at("payload").at("defects").at(0);
  EXPECT_EQ(defect.at("class_name"), "scratch");
  EXPECT_DOUBLE_EQ(defect.at("score").get<double>(), 0.875);
  EXPECT_DOUBLE_EQ(defect.at("box").at("width").get<double>(), 30.0);
  EXPECT_EQ(vision.at("payload").at("measurements").at(0).at("unit"), "mm");
  EXPECT_EQ(vision.at("payload").at("part_id"), 77);

  const json& control = records[4];
  EXPECT_EQ(control.at("type"), "SFCT");
  EXPECT_EQ(control.at("payload").at("body_type"), "PlacementOrder");
  EXPECT_EQ(control.at("payload").at("body").at("action"), "Move");
  EXPECT_EQ(control.at("payload").at("body").at("target_unit_id"), "unit-b");

  EXPECT_EQ(runner->counter_value("written"), 5);
  EXPECT_EQ(runner->counter_value("summarized"), 0);
  EXPECT_EQ(runner->counter_value("unprintable"), 0);
}

TEST(JsonlStage, UnknownIdentifierIsWrittenAsUnknownType) {
  TempFile file;
  auto runner = jsonl_runner(file.path());
  ASSERT_TRUE(runner->start().ok());
  ASSERT_TRUE(runner->feed("in", envelope(make_unknown())).ok());
  runner->stop();

  const std::vector<json> records = file.records();
  ASSERT_EQ(records.size(), 1U);
  EXPECT_EQ(records[0].at("type"), "ZZZZ");
  EXPECT_EQ(records[0].at("payload").at("unknown_type"), "ZZZZ");
  EXPECT_EQ(records[0].at("payload").at("bytes"), 24);
  EXPECT_EQ(runner->counter_value("unprintable"), 1);
}

TEST(JsonlStage, PayloadsAboveTheLimitAreSummarized) {
  TempFile file;
  auto runner = jsonl_runner(file.path());
  ASSERT_TRUE(runner->set("max_payload_bytes", ParamValue(std::int64_t{256})).ok());
  ASSERT_TRUE(runner->start().ok());
  const PayloadPtr big = make_frame(64, 48);
  ASSERT_TRUE(runner->feed("in", envelope(big)).ok());
  ASSERT_TRUE(runner->feed("in", envelope(make_blob(1, 5, 8), 1, 5)).ok());
  runner->stop();

  const std::vector<std::string> lines = file.lines();
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_LT(lines[0].size(), 256U);
  const json frame = json::parse(lines[0]);
  EXPECT_EQ(frame.at("type"), "SFFR");
  EXPECT_EQ(frame.at("payload"), (json{{"type", "SFFR"}, {"bytes", big->size()}}));
  const json blob = json::parse(lines[1]);
  EXPECT_EQ(blob.at("payload").at("seq"), 5);
  EXPECT_EQ(runner->counter_value("summarized"), 1);
  EXPECT_EQ(runner->counter_value("written"), 2);
}

TEST(JsonlStage, CorruptBufferIsReportedNotRead) {
  const PayloadPtr good = make_blob(1, 1, 32);
  std::vector<std::uint8_t> bytes(good->data(), good->data() + good->size());
  bytes[0] = 0xF0;  // root offset far outside the buffer
  bytes[1] = 0xFF;
  TempFile file;
  auto runner = jsonl_runner(file.path());
  ASSERT_TRUE(runner->start().ok());
  ASSERT_TRUE(runner->feed("in", envelope(Payload::adopt(std::move(bytes)))).ok());
  runner->stop();

  const std::vector<json> records = file.records();
  ASSERT_EQ(records.size(), 1U);
  EXPECT_EQ(records[0].at("payload").at("type"), "SFBL");
  EXPECT_TRUE(records[0].at("payload").contains("error"));
  EXPECT_EQ(runner->counter_value("unprintable"), 1);
}

TEST(JsonlStage, FlushMakesEachLineVisibleAtOnce) {
  TempFile file;
  auto runner = jsonl_runner(file.path());
  ASSERT_TRUE(runner->set("flush", ParamValue(true)).ok());
  ASSERT_TRUE(runner->start().ok());
  ASSERT_TRUE(runner->feed("in", envelope(make_blob(1, 0, 4))).ok());
  EXPECT_EQ(file.lines().size(), 1U);
  runner->stop();
}

TEST(JsonlStage, RestartAppendsInsteadOfTruncating) {
  TempFile file;
  auto runner = jsonl_runner(file.path());
  ASSERT_TRUE(runner->start().ok());
  ASSERT_TRUE(runner->feed("in", envelope(make_blob(1, 0, 4), 1, 0)).ok());
  runner->stop();
  ASSERT_TRUE(runner->start().ok());
  ASSERT_TRUE(runner->feed("in", envelope(make_blob(1, 1, 4), 1, 1)).ok());
  runner->stop();

  const std::vector<json> records = file.records();
  ASSERT_EQ(records.size(), 2U);
  EXPECT_EQ(records[0].at("seq"), 0);
  EXPECT_EQ(records[1].at("seq"), 1);
}

TEST(JsonlStage, StartTruncatesAnOldFile) {
  TempFile file;
  {
    std::ofstream old(file.path());
    old << "stale\n";
  }
  auto runner = jsonl_runner(file.path());
  ASSERT_TRUE(runner->start().ok());
  ASSERT_TRUE(runner->feed("in", envelope(make_blob(1, 0, 4))).ok());
  runner->stop();
  const std::vector<json> records = file.records();
  ASSERT_EQ(records.size(), 1U);
  EXPECT_EQ(records[0].at("type"), "SFBL");
}

TEST(JsonlStage, StartFailsWithThePathAndTheReason) {
  const std::string path = "/nonexistent-swarmflow-dir/out.jsonl";
  auto runner = jsonl_runner(path);
  const Status s = runner->start();
  ASSERT_TRUE(s.is_error());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No such file or directory"), std::string::npos) << s.message();
}

TEST(JsonlStage, NonFiniteConfidenceIsNull) {
  TempFile file;
  auto runner = jsonl_runner(file.path());
  ASSERT_TRUE(runner->start().ok());
  Envelope e = envelope(make_blob(1, 0, 4));
  EnvelopeHeader h = e.header();
  h.confidence = std::nanf("");
  ASSERT_TRUE(runner->feed("in", e.with_header(h)).ok());
  runner->stop();
  const std::vector<json> records = file.records();
  ASSERT_EQ(records.size(), 1U);
  EXPECT_TRUE(records[0].at("confidence").is_null());
}

// -- PayloadPrinter ---------------------------------------------------------

TEST(PayloadPrinter, ParsesEveryEmbeddedSchema) {
  const io::PayloadPrinter& printer = io::PayloadPrinter::instance();
  EXPECT_TRUE(printer.errors().empty()) << printer.errors().front();
  EXPECT_EQ(printer.identifiers().size(), embedded_schemas().size());
  for (const char* id : {"SFBL", "SFCT", "SFEH", "SFFR", "SFTK", "SFVR"}) {
    EXPECT_TRUE(printer.knows(id)) << id;
  }
  EXPECT_EQ(printer.root_type("SFFR"), "swarmflow.schema.Frame");
  EXPECT_EQ(printer.root_type("ZZZZ"), "");
}

TEST(PayloadPrinter, PrintsOneLine) {
  std::string out;
  ASSERT_TRUE(io::PayloadPrinter::instance().to_json(*make_vision(0.5F), &out));
  EXPECT_EQ(out.find('\n'), std::string::npos);
  EXPECT_EQ(json::parse(out).at("camera_id"), "cam0");
}

TEST(PayloadPrinter, NonFiniteFloatsBecomeNull) {
  std::string out;
  ASSERT_TRUE(io::PayloadPrinter::instance().to_json(*make_vision(std::nanf("")), &out));
  const json j = json::parse(out);
  EXPECT_TRUE(j.at("defects").at(0).at("score").is_null());
}

TEST(PayloadPrinter, TextThatIsNotUtf8GivesAnError) {
  flatbuffers::FlatBufferBuilder ctl;
  auto hb = schema::CreateHeartbeatDirect(ctl, "unit-\xff\xfe", 1, 2);
  ctl.Finish(schema::CreateControl(ctl, schema::ControlBody::Heartbeat, hb.Union()),
             schema::ControlIdentifier());
  std::string out;
  EXPECT_FALSE(io::PayloadPrinter::instance().to_json(*Payload::from_builder(ctl), &out));
  const json j = json::parse(out);
  EXPECT_EQ(j.at("type"), "SFCT");
  EXPECT_TRUE(j.contains("error"));
}

TEST(PayloadPrinter, ShortBufferIsUnknown) {
  const std::uint8_t bytes[3] = {1, 2, 3};
  std::string out;
  EXPECT_FALSE(io::PayloadPrinter::instance().to_json(*Payload::copy_of(bytes, sizeof bytes), &out));
  const json j = json::parse(out);
  EXPECT_EQ(j.at("unknown_type"), "");
  EXPECT_EQ(j.at("bytes"), 3);
}

TEST(PayloadPrinter, SkipsSchemasWithoutIdentifier) {
  const std::vector<std::pair<std::string_view, std::string_view>> schemas = {
      {"ok.fbs", "table A { x:int; } root_type A; file_identifier \"AAAA\";"},
      {"noid.fbs", "table B { x:int; } root_type B;"},
      {"broken.fbs", "table C { x:int "},
  };
  const io::PayloadPrinter printer(schemas);
  EXPECT_TRUE(printer.knows("AAAA"));
  EXPECT_EQ(printer.identifiers().size(), 1U);
  ASSERT_EQ(printer.errors().size(), 2U);
  EXPECT_NE(printer.errors()[0].find("noid.fbs"), std::string::npos);
  EXPECT_NE(printer.errors()[1].find("broken.fbs"), std::string::npos);
}

TEST(PayloadJson, QuoteEscapesControlAndNonAsciiBytes) {
  EXPECT_EQ(io::json_quote("SFBL"), "\"SFBL\"");
  EXPECT_EQ(json::parse(io::json_quote(std::string("a\"b\\c\n\x01\xff", 8))),
            std::string("a\"b\\c\n\x01\xc3\xbf"));
}

}  // namespace
}  // namespace swarmflow
