// `swarmflow top` (top.hpp): the terminal and the network; top_view.cpp draws.

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>

#include <httplib.h>

#include "cli/top.hpp"

namespace swarmflow::cli {
namespace {

std::atomic<bool> g_quit{false};

extern "C" void on_quit_signal(int) { g_quit.store(true); }

/// The terminal in the state `top` needs (no echo, keys one at a time, the
/// alternate screen, no cursor), and back as it was when it goes.
class Screen {
 public:
  Screen() {
    tty_ = isatty(STDIN_FILENO) != 0 && tcgetattr(STDIN_FILENO, &saved_) == 0;
    if (tty_) {
      termios raw = saved_;
      raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    std::fputs("\x1b[?1049h\x1b[?25l", stdout);
    std::fflush(stdout);
  }
  ~Screen() {
    std::fputs("\x1b[?25h\x1b[?1049l", stdout);
    std::fflush(stdout);
    if (tty_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  static void size(int* width, int* height) {
    winsize ws{};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
      *width = ws.ws_col;
      *height = ws.ws_row;
    } else {
      *width = 80;
      *height = 24;
    }
  }

  void draw(const std::vector<std::string>& lines) {
    std::string frame = "\x1b[H";
    for (std::size_t i = 0; i < lines.size(); ++i) {
      frame += lines[i];
      frame += "\x1b[K";
      if (i + 1 < lines.size()) frame += "\r\n";
    }
    frame += "\x1b[J";
    std::fwrite(frame.data(), 1, frame.size(), stdout);
    std::fflush(stdout);
  }

  /// Waits up to `ms` for a key; true when it was q (or Q).
  bool quit_key(int ms) {
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0 || (p.revents & POLLIN) == 0) return false;
    char c = 0;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 0) {
      // Standard input closed: nothing more to read; wait the rest out.
      closed_ = true;
      return false;
    }
    return n == 1 && (c == 'q' || c == 'Q');
  }
  bool input_closed() const { return closed_; }

 private:
  bool tty_ = false;
  bool closed_ = false;
  termios saved_{};
};

bool split_address(const std::string& address, std::string* host, int* port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  try {
    std::size_t used = 0;
    *port = std::stoi(address.substr(colon + 1), &used);
    return used == address.size() - colon - 1 && *port > 0 && *port <= 65535;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

int run_top(const std::string& address, double interval_s) {
  std::string host;
  int port = 0;
  if (!split_address(address, &host, &port)) {
    std::fprintf(stderr, "swarmflow top: expected HOST:PORT (a coordinator's --metrics or --web address), got '%s'\n",
                 address.c_str());
    return 2;
  }
  httplib::Client client(host, port);
  client.set_connection_timeout(1, 0);
  client.set_read_timeout(2, 0);
  auto first = client.Get("/api/v1/state");
  if (!first || first->status != 200) {
    std::fprintf(stderr, "swarmflow top: no swarmflow coordinator answers at %s (%s)\n", address.c_str(),
                 first ? ("HTTP " + std::to_string(first->status)).c_str() : httplib::to_string(first.error()).c_str());
    return 1;
  }
  g_quit.store(false);
  struct sigaction sa {};
  sa.sa_handler = on_quit_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {}, old_hup {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  std::string why;
  {
    Screen screen;
    std::string state = first->body;
    std::string previous;
    double since = 0;
    auto taken = std::chrono::steady_clock::now();  // the last look
    auto state_at = taken;                           // when `state` was taken
    int misses = 0;
    const int interval_ms = static_cast<int>(interval_s * 1000);
    while (!g_quit.load()) {
      int width = 80;
      int height = 24;
      Screen::size(&width, &height);
      screen.draw(top_lines(state, previous, since, address, width, height));
      // Wait for the next look, a key, or a signal.
      const auto due = taken + std::chrono::milliseconds(interval_ms);
      bool quit = false;
      while (!quit && !g_quit.load() && std::chrono::steady_clock::now() < due) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(due - std::chrono::steady_clock::now());
        const int wait = static_cast<int>(std::min<long long>(100, std::max<long long>(1, left.count())));
        if (screen.input_closed()) {
          ::poll(nullptr, 0, wait);
        } else {
          quit = screen.quit_key(wait);
        }
      }
      if (quit) break;
      if (g_quit.load()) break;
      auto res = client.Get("/api/v1/state");
      const auto at = std::chrono::steady_clock::now();
      taken = at;
      if (!res || res->status != 200) {
        // Three looks in a row without an answer: the coordinator is gone.
        if (++misses >= 3) {
          why = "the coordinator at " + address + " is gone";
          break;
        }
        continue;
      }
      misses = 0;
      previous = std::move(state);
      state = res->body;
      since = std::chrono::duration<double>(at - state_at).count();
      state_at = at;
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  if (!why.empty()) std::fprintf(stderr, "swarmflow top: %s\n", why.c_str());
  return 0;
}

}  // namespace swarmflow::cli
