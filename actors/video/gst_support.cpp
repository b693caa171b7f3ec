#include "video/gst_support.hpp"

#include <gst/gst.h>

#include <swarmflow/envelope.hpp>
#include <swarmflow/log.hpp>

namespace swarmflow::video {

void ensure_gst_initialised() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (gst_is_initialized() == FALSE) gst_init(nullptr, nullptr);
  });
}

bool gst_element_available(const std::string& name) {
  ensure_gst_initialised();
  GstElementFactory* factory = gst_element_factory_find(name.c_str());
  if (factory == nullptr) return false;
  gst_object_unref(factory);
  return true;
}

bool is_test_pattern(const std::string& pattern, std::string* known) {
  ensure_gst_initialised();
  GstElement* src = gst_element_factory_make("videotestsrc", nullptr);
  if (src == nullptr) {
    *known = "(videotestsrc is not installed)";
    return false;
  }
  gst_object_ref_sink(src);
  bool found = false;
  GParamSpec* spec = g_object_class_find_property(G_OBJECT_GET_CLASS(src), "pattern");
  if (spec != nullptr && G_IS_PARAM_SPEC_ENUM(spec)) {
    GEnumClass* values = G_PARAM_SPEC_ENUM(spec)->enum_class;
    found = g_enum_get_value_by_nick(values, pattern.c_str()) != nullptr;
    if (!found) {
      known->clear();
      for (guint i = 0; i < values->n_values; ++i) {
        if (!known->empty()) *known += ", ";
        *known += values->values[i].value_nick;
      }
    }
  }
  gst_object_unref(src);
  return found;
}

RateLimitedLog::RateLimitedLog(std::string name, std::int64_t interval_ns)
    : name_(std::move(name)), interval_ns_(interval_ns) {}

void RateLimitedLog::log(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::int64_t now = steady_now_ns();
  if (last_ns_ != 0 && now - last_ns_ < interval_ns_) {
    ++suppressed_;
    return;
  }
  std::string extra;
  if (suppressed_ > 0) extra = " (" + std::to_string(suppressed_) + " similar messages suppressed)";
  swarmflow::log::warn("%s: %s%s", name_.c_str(), message.c_str(), extra.c_str());
  last_ns_ = now;
  suppressed_ = 0;
}

}  // namespace swarmflow::video
