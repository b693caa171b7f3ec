#!/usr/bin/env bash
# Installs the Debian 12 packages swarmflow needs, only those that are missing.
# Idempotent; works as root or through sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libcaf-dev
  libzmq3-dev cppzmq-dev
  libflatbuffers-dev flatbuffers-compiler
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libspdlog-dev                                 # swarmflow's log (levels, timestamps, --log-file)
  libgtest-dev libgmock-dev libbenchmark-dev
  iproute2
  graphviz                                      # dot draws `swarmflow graph`
  libopencv-dev
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-ugly gstreamer1.0-libav  # x264enc writes H.264, avdec_h264 reads it
  libgstrtspserver-1.0-dev                      # the RTSP camera of the video tests
  libcpp-httplib-dev                            # --metrics serves /metrics over HTTP
  prometheus                                    # promtool and a real server scrape /metrics in the tests
  tmux                                          # `swarmflow top` is tested in a tmux pane
  chromium                                      # the web view (--web) is tested in headless Chromium
)

# Node.js and npm run the tests' HTTP clients (tests/clients); a machine
# that has them from elsewhere keeps its own.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "swarmflow: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "swarmflow: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
