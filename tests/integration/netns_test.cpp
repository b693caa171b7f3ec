// The split pipeline with each unit process in its own network namespace,
// joined by veth pairs to a bridge in a fourth namespace: the units reach each
// other only over real (virtual) links, at addresses of their own.

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "support/process.hpp"

namespace {

using namespace swarmflow::testing;

int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

/// Namespaces sf<pid>b (the bridge) and sf<pid>u0..u2, removed at the end.
class Namespaces {
 public:
  Namespaces() : prefix_("sf" + std::to_string(getpid())) {}
  ~Namespaces() {
    for (const auto& ns : made_) sh("ip netns del " + ns);
  }
  std::string name(const std::string& suffix) const { return prefix_ + suffix; }

  /// Builds the network; false (and `why`) where namespaces cannot be made here.
  bool build(std::string* why) {
    if (sh("ip netns add " + name("b")) != 0) {
      *why = "cannot create network namespaces here (ip netns add needs root and CAP_SYS_ADMIN)";
      return false;
    }
    made_.push_back(name("b"));
    const std::string br = "ip -n " + name("b") + " ";
    if (sh(br + "link add br0 type bridge") != 0 || sh(br + "link set br0 up") != 0) {
      *why = "cannot create a bridge in a network namespace";
      return false;
    }
    for (int i = 0; i < 3; ++i) {
      const std::string ns = name("u" + std::to_string(i));
      const std::string port = "v" + std::to_string(i);
      if (sh("ip netns add " + ns) != 0) {
        *why = "cannot create namespace " + ns;
        return false;
      }
      made_.push_back(ns);
      const std::string in = "ip -n " + ns + " ";
      if (sh("ip link add " + port + " netns " + name("b") + " type veth peer name eth0 netns " + ns) != 0 ||
          sh(br + "link set " + port + " master br0") != 0 || sh(br + "link set " + port + " up") != 0 ||
          sh(in + "addr add " + address(i) + "/24 dev eth0") != 0 || sh(in + "link set eth0 up") != 0 ||
          sh(in + "link set lo up") != 0) {
        *why = "cannot wire namespace " + ns + " with a veth pair";
        return false;
      }
    }
    return true;
  }

  static std::string address(int i) { return "10.231.77." + std::to_string(i + 1); }

 private:
  std::string prefix_;
  std::vector<std::string> made_;
};

void keygen(const TempDir& dir, const std::string& name) {
  pid_t p = spawn_cli({"keygen", dir.file(name + ".key")}, dir.file("keygen.out"), dir.file("keygen.err"));
  ASSERT_EQ(wait_exit(p), 0) << slurp(dir.file("keygen.err"));
}

/// Runs `swarmflow ARGS` inside namespace `ns`.
pid_t spawn_in(const std::string& ns, const std::vector<std::string>& args, const std::string& out,
               const std::string& err) {
  std::vector<std::string> full = {"ip", "netns", "exec", ns, SWARMFLOW_CLI};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  if (posix_spawnp(&pid, "ip", &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

TEST(NetworkNamespaces, SplitPipelineAcrossVethLinksLosesNothing) {
  Namespaces net;
  std::string why;
  if (!net.build(&why)) GTEST_SKIP() << "skipped: " << why;

  TempDir dir;
  for (const char* k : {"u0", "u1", "u2"}) keygen(dir, k);
  auto at = [](int i, int port) { return "tcp://" + Namespaces::address(i) + ":" + std::to_string(port); };
  const std::string file = dir.write(
      "netns.yaml",
      "pipeline: netns\n"
      "coordinator: \"" + at(0, 7100) + "\"\n"
      "coordinator_key: u0.key.pub\n"
      "units:\n"
      "  - {id: u0, endpoint: \"" + at(0, 7000) + "\", public_key: u0.key.pub}\n"
      "  - {id: u1, endpoint: \"" + at(1, 7000) + "\", public_key: u1.key.pub}\n"
      "  - {id: u2, endpoint: \"" + at(2, 7000) + "\", public_key: u2.key.pub}\n"
      "stages:\n"
      "  - {id: source, type: sim.source, params: {count: 3000, streams: 4, payload_bytes: 1024},\n"
      "     placement: {units: [u0]}}\n"
      "  - {id: work, type: sim.work, replicas: 2, key: stream, inputs: {in: source/out},\n"
      "     placement: {units: [u1, u2], spread: true}}\n"
      "  - {id: sink, type: sim.sink, inputs: {in: work/out}, placement: {units: [u2]}}\n");
  const std::string report = dir.file("report.json");
  pid_t u1 = spawn_in(net.name("u1"), {"unit", file, "--id", "u1", "--secret-key", dir.file("u1.key")},
                      dir.file("u1.out"), dir.file("u1.err"));
  pid_t u2 = spawn_in(net.name("u2"), {"unit", file, "--id", "u2", "--secret-key", dir.file("u2.key")},
                      dir.file("u2.out"), dir.file("u2.err"));
  pid_t coordinator =
      spawn_in(net.name("u0"),
               {"run", file, "--quiet", "--units", "u0", "--secret-key", dir.file("u0.key"), "--report", report},
               dir.file("c.out"), dir.file("c.err"));
  ASSERT_EQ(wait_exit(coordinator), 0) << slurp(dir.file("c.err"));
  EXPECT_EQ(wait_exit(u1), 0) << slurp(dir.file("u1.err"));
  EXPECT_EQ(wait_exit(u2), 0) << slurp(dir.file("u2.err"));
  const auto r = nlohmann::json::parse(slurp(report));
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump(2);
  EXPECT_EQ(r["sinks"]["sink"]["received"], 3000);
  EXPECT_EQ(r["sinks"]["sink"]["lost"], 0);
  EXPECT_EQ(r["sinks"]["sink"]["duplicate"], 0);
  EXPECT_EQ(r["sinks"]["sink"]["reordered"], 0);
  for (const auto& e : r["edges"]) {
    EXPECT_EQ(e["sent"].get<std::uint64_t>(), e["delivered"].get<std::uint64_t>() + e["dropped"].get<std::uint64_t>());
  }
}

}  // namespace
