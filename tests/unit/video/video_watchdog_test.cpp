// The live-source watchdog end to end: an HTTP camera that is not there yet,
// then comes (a tiny MJPEG server in the test), then goes away again. The
// source keeps returning ok throughout, counts its reconnects and the gap,
// and delivers frames while the camera is there.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "video_test_support.hpp"

namespace swarmflow {
namespace {

using testing::StageRunner;
using video_test::pull_until;
using video_test::video_registry;

/// A loopback TCP port that nothing listens on (bound once, then released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// An HTTP camera: serves `multipart/x-mixed-replace` JPEG frames, one every
/// 20 ms, to one client at a time, until destroyed.
class MjpegServer {
 public:
  explicit MjpegServer(int port) {
    cv::Mat image(120, 160, CV_8UC3, cv::Scalar(40, 160, 220));
    cv::imencode(".jpg", image, jpeg_);
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    listening_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd_, 4) == 0;
    if (listening_) thread_ = std::thread([this] { run(); });
  }
  ~MjpegServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  bool listening() const { return listening_; }

 private:
  void run() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int client = ::accept(fd_, nullptr, nullptr);
      if (client < 0) continue;
      serve(client);
      ::close(client);
    }
  }

  void serve(int client) {
    // Read the request head.
    std::string request;
    char buffer[1024];
    while (!stop_ && request.find("\r\n\r\n") == std::string::npos) {
      pollfd p{client, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = ::recv(client, buffer, sizeof(buffer), 0);
      if (n <= 0) return;
      request.append(buffer, static_cast<std::size_t>(n));
    }
    const std::string head =
        "HTTP/1.0 200 OK\r\nContent-Type: multipart/x-mixed-replace; boundary=frame\r\nCache-Control: no-cache\r\n\r\n";
    if (!send_all(client, head.data(), head.size())) return;
    while (!stop_) {
      const std::string part_head =
          "--frame\r\nContent-Type: image/jpeg\r\nContent-Length: " + std::to_string(jpeg_.size()) + "\r\n\r\n";
      if (!send_all(client, part_head.data(), part_head.size()) ||
          !send_all(client, reinterpret_cast<const char*>(jpeg_.data()), jpeg_.size()) ||
          !send_all(client, "\r\n", 2)) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  static bool send_all(int fd, const char* data, std::size_t size) {
    while (size > 0) {
      const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
      if (n <= 0) return false;
      data += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  }

  std::vector<std::uint8_t> jpeg_;
  int fd_ = -1;
  bool listening_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(VideoWatchdog, LiveHttpSourceReconnectsUntilTheCameraComesBack) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  StageRunner source(video_registry(), "video.source", "door");
  video_test::StopGuard stop_source(source);
  ASSERT_TRUE(source.set("uri", "http://127.0.0.1:" + std::to_string(port) + "/stream").ok());
  ASSERT_TRUE(source.set("reconnect_ms", std::int64_t{20}).ok());
  ASSERT_TRUE(source.set("reconnect_max_ms", std::int64_t{200}).ok());
  Status s = source.start();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(source.live());

  // Nothing listens: every attempt fails, the source keeps returning ok.
  bool all_ok = true;
  s = pull_until(
      source, [&] { return source.counter_value("reconnects") >= 3; }, std::chrono::seconds(60), &all_ok);
  EXPECT_TRUE(all_ok) << s.message();
  EXPECT_GE(source.counter_value("reconnects"), 3);
  EXPECT_TRUE(source.output("frames").empty());

  std::int64_t reconnects_while_up = 0;
  {
    // The camera comes (back): frames arrive after the next reconnect.
    MjpegServer camera(port);
    ASSERT_TRUE(camera.listening());
    s = pull_until(
        source, [&] { return source.output("frames").size() >= 5; }, std::chrono::seconds(60), &all_ok);
    EXPECT_TRUE(all_ok) << s.message();
    const auto& frames = source.output("frames");
    ASSERT_GE(frames.size(), 5U);
    for (std::size_t i = 0; i < frames.size(); ++i) {
      const auto* f = frames[i].as<schema::Frame>();
      EXPECT_EQ(f->width(), 160U);
      EXPECT_EQ(f->height(), 120U);
      EXPECT_EQ(f->camera_id()->str(), "door-0");
      if (i > 0) {
        EXPECT_GT(f->frame_index(), frames[i - 1].as<schema::Frame>()->frame_index());
      }
    }
    EXPECT_GT(source.counter_value("gap_ms"), 0);  // the outage was measured
    reconnects_while_up = source.counter_value("reconnects");
  }

  // The camera goes away again: the source notices, keeps returning ok and
  // reconnects.
  s = pull_until(
      source, [&] { return source.counter_value("reconnects") > reconnects_while_up; }, std::chrono::seconds(60),
      &all_ok);
  EXPECT_TRUE(all_ok) << s.message();
  EXPECT_GT(source.counter_value("reconnects"), reconnects_while_up);
  source.stop();
}

TEST(VideoWatchdog, GivesUpAfterMaxReconnects) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  StageRunner source(video_registry(), "video.source", "door");
  video_test::StopGuard stop_source(source);
  ASSERT_TRUE(source.set("uri", "http://127.0.0.1:" + std::to_string(port) + "/stream").ok());
  ASSERT_TRUE(source.set("reconnect_ms", std::int64_t{10}).ok());
  ASSERT_TRUE(source.set("max_reconnects", std::int64_t{2}).ok());
  ASSERT_TRUE(source.start().ok());
  Status s = pull_until(
      source, [] { return false; }, std::chrono::seconds(60));
  EXPECT_TRUE(s.is_error());
  EXPECT_NE(s.message().find("gave up after 2 reconnects"), std::string::npos) << s.message();
  EXPECT_EQ(source.counter_value("reconnects"), 2);
  source.stop();
}

}  // namespace
}  // namespace swarmflow
