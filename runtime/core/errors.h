// Exception types of the runtime. Messages start with the module and carry the bad value and
// where it came from: `ds_config.json: zero_optimization.stage: 5 is not one of 0,1,2,3`,
// `rendezvous: ranks 3, 5 did not join within 60 s`, `plugin libfoo.so: …`. dsworker prints
// them as `dsworker: error: <message>` and exits with the status noted on each type.
#pragma once
#include <stdexcept>

namespace ds {

// A bad ds_config (or a bad dsworker flag): exit status 2.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Rendezvous, store or collective failure (a peer vanished, a timeout, a refused token): exit 1.
struct CommError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A model plugin could not be loaded or reported an error: exit 1.
struct PluginError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ds
