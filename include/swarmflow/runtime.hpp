#pragma once
/// \file runtime.hpp
/// Embeds swarmflow: load a pipeline, add your own stages, subscribe to
/// outputs, run, and read the report. Everything runs in this process; no
/// server needs to be started.

#include <functional>
#include <memory>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <swarmflow/envelope.hpp>
#include <swarmflow/registry.hpp>
#include <swarmflow/report.hpp>
#include <swarmflow/status.hpp>

namespace swarmflow {

/// Options of a run that the pipeline file does not carry.
struct RuntimeOptions {
  /// Worker threads per unit; 0 = the unit's `threads`, else the machine's
  /// cores shared by the units of this process.
  int threads = 0;
  /// Ids of the units this process hosts; empty = all of them. The others run
  /// as `swarmflow unit` processes and join the coordinator.
  std::vector<std::string> units;
  /// Whether this process runs the coordinator (`swarmflow run`) or is a unit
  /// process that joins one (`swarmflow unit`).
  bool coordinator = true;
  /// How long to wait for units to join and for the placement, in ms.
  int join_timeout_ms = 30000;
  /// How long a unit process waits for the coordinator's goodbye, in ms; it
  /// does not wait for a coordinator its failure detector has declared lost.
  /// (When a unit or the coordinator is declared dead is set by the pipeline
  /// file's `failure:` section, the same for every process.)
  int leave_timeout_ms = 5000;
  /// The CURVE key pair file (`swarmflow keygen`) of the units and the
  /// coordinator hosted here; needed when any of them is on tcp://.
  std::string secret_key_path;
  /// Keep freed frame-sized blocks in the heap for the next frame
  /// (`keep_freed_frames_in_heap()`): a process-wide change of glibc's
  /// malloc settings, made once, by the first Runtime constructed with it on,
  /// while other threads may already be allocating. False leaves the C
  /// library's allocator as the application set it.
  bool tune_allocator = true;
  /// A unit process sends its figures (counters, histograms, queue depths)
  /// to the coordinator this often, in ms, so that the coordinator's
  /// progress line, report, metrics, `swarmflow top` and web view show them
  /// live; 0 sends them only at the end (UnitDone).
  int figures_ms = 500;
  /// Samples every envelope whose seq is a multiple of this at every step
  /// of this process's replicas, for `trace()`; 0: none.
  std::uint64_t trace_every = 0;
  /// Record each step's residence (arrival -> end of step) and each edge's
  /// hop latency into the report's histograms. Off only to measure what
  /// they cost (the chain and transport benchmarks' --observe-cost).
  bool hop_figures = true;
};

/// Makes a CURVE key pair for a unit (or the coordinator) and writes it to
/// `path` (both keys, mode 0600) and `path.pub` (the public key, to list as
/// the unit's `public_key`). Refuses to replace files unless `overwrite`.
Status write_key_pair(const std::string& path, bool overwrite = false);

/// A pipeline's life: load -> (subscribe) -> start -> wait, or stop.
class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The stage catalogue, with the runtime's own packs (sim, io) already
  /// added. Add your own stages, and the packs on OpenCV and GStreamer you
  /// link (`register_video_stages`, `register_vision_stages`,
  /// `register_inspection_stages`), before `load_*`.
  Registry& registry();

  /// Loads and validates a pipeline definition. On failure every mistake is in
  /// `diagnostics` (when given) and the status is `invalid_argument`. The
  /// plugins its `plugins:` names are loaded into `registry()` first.
  Status load_file(const std::string& path, std::vector<Diagnostic>* diagnostics = nullptr);
  Status load_string(const std::string& yaml, const std::string& name,
                     std::vector<Diagnostic>* diagnostics = nullptr);

  /// Called with every envelope emitted on `stage/port`. Runs on a worker
  /// thread of the producing replica: keep it short. Call before `start`.
  using Subscriber = std::function<void(const Envelope&)>;
  Status subscribe(const std::string& stage_port, Subscriber subscriber);

  /// Starts every replica. The run ends by itself when all sources end.
  Status start();
  /// Asks sources to end; everything in flight drains. Safe from any thread.
  void request_stop();
  /// Ends the run now, without draining: what is in flight is lost (and
  /// shows as such in the report). For a second Ctrl-C, or a unit process
  /// whose peers are gone.
  void abort(const std::string& reason);
  /// In a unit process (`coordinator = false`): leaves the running pipeline
  /// without ending it. The coordinator places this unit's replicas on the
  /// others at once (a failover without waiting for the failure detector;
  /// producers replay what they had not released), this unit stops them,
  /// sends its figures and leaves; the run goes on. Fails when this is the
  /// coordinator's process or the coordinator is gone (then use
  /// request_stop or abort). Safe from any thread.
  Status leave();
  /// Blocks until the run has ended; returns its status.
  Status wait();

  // -- placement while the run goes on (docs/placement.md) ----------------
  /// Sets a unit's speed factor from now on (as `scenario:` does at given
  /// times): every step there takes 1/speed as long (StageContext::speed()).
  /// A unit of this process; any time after load (before start, it holds
  /// from the start). Safe from any thread.
  Status set_unit_speed(const std::string& unit, double speed);
  /// Moves replica `replica` of `stage` to `unit`, without losing,
  /// repeating or reordering anything (it drains first). Queued behind any
  /// move under way; refused when it cannot be made (a source, a stage in a
  /// cycle, a sink without state, a unit its placement.units excludes).
  /// Every unit in this process; after start. Safe from any thread.
  Status move_replica(const std::string& stage, int replica, const std::string& unit);
  /// Gives keys of keyed `stage` to other replicas: (key, replica) pairs.
  /// Each replica that gives keys away drains first, so each key's order
  /// holds. Refused for a stage that keeps state per replica.
  Status reassign_keys(const std::string& stage, const std::vector<std::pair<std::uint64_t, int>>& keys);
  /// Moves completed so far (asked for, or the adaptive policy's).
  std::uint64_t moves_completed() const;
  /// `start` then `wait`.
  Status run();

  /// The report: live while running, final after `wait`.
  RunReport report() const;
  /// The loaded graph in Graphviz DOT.
  std::string dot() const;
  /// With RuntimeOptions::trace_every: the sampled steps as Chrome
  /// trace-event JSON (Perfetto, chrome://tracing), at most 200 000 of them
  /// (the rest counted in otherData.dropped_steps); empty without it.
  std::string trace() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace swarmflow
