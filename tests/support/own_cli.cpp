// An application with a stage of its own that gets the stock command's every
// subcommand through swarmflow::cli_main (swarmflow/cli.hpp).

#include <swarmflow/cli.hpp>
#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/stage.hpp>

namespace {

/// own.pass — input `in` (Blob), output `out` (Blob): passes blobs on.
class Pass final : public swarmflow::Stage {
 public:
  void setup(swarmflow::StageSpec& s) override {
    in_ = s.input<swarmflow::schema::Blob>("in", "blobs");
    out_ = s.output<swarmflow::schema::Blob>("out", "the same blobs");
  }
  swarmflow::Status process(swarmflow::Inputs& in, swarmflow::Outputs& out, swarmflow::StageContext&) override {
    if (const swarmflow::Envelope* e = in.envelope(in_)) out.forward(out_, *e);
    return {};
  }

 private:
  swarmflow::InputPort<swarmflow::schema::Blob> in_;
  swarmflow::OutputPort<swarmflow::schema::Blob> out_;
};

}  // namespace

int main(int argc, char** argv) {
  swarmflow::CliOptions options;
  options.program = "own-tool";
  options.stage_packs.push_back(
      [](swarmflow::Registry& r) { return r.add<Pass>("own.pass", "passes blobs on unchanged"); });
  return swarmflow::cli_main(argc, argv, options);
}
