// ZeRO stage 3 with the optimizer on the device (a GPU): each rank keeps only its partition of the
// parameters there, and a layer's parameters are all-gathered there, over the ranks' device group
// (NCCL), just before the layer runs, as DeepSpeed's stage 3 gathers them on the GPU.
//   partition [n]: this rank's chunks of every unit (at stage 3 a unit is a layer), in the optimizer's
//              flat order, in the parameters' storage type, as the host and DeepSpeed keep them: in
//              16-bit training 16-bit values, which DeviceStep narrows from its fp32 master after each
//              update (take_master); in fp32 the master itself, which DeviceStep updates in place;
//   two slots: a layer's gather (in the storage type: 16 bits cross in 16-bit training) lands in one
//              unit buffer [max padded] (one gather is under way at a time) and is widened or copied
//              into a slot's fp32 views [max layer, each tensor 16-byte aligned], which DeviceLayers'
//              calls read (provide_params). The layer after the one acquired is gathered
//              for the other slot while the acquired one runs; a layer still in its slot (the last
//              layer, from its forward to its backward; the first, between micro-batches) is not
//              gathered again.
//   kept:      a persistent layer (stage3_param_persistence_threshold, as the host's fetcher decides)
//              has views of its own: gathered at its first use after an update, it stays until the
//              next update, and takes neither slot (the layers around it keep theirs);
//   ties:      a tied parameter's user (GPT's head) reads a copy of its owner's values, taken when
//              the owner's layer is gathered (every pass's first forward comes before the user).
// Every rank acquires the same layers in the same order, so the ranks' gathers match. One rank:
// the "gather" is the copy of its partition's unit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "comm/process_group.h"
#include "engine/device_layers.h"
#include "engine/memory_report.h"

namespace ds {

class DeviceGather {
 public:
  struct Param {
    ds_shape shape;
    size_t size = 0;             // elements
    size_t in_unit = 0;          // its values' place in its unit's gathered buffer (own ones)
    std::optional<size_t> tie;   // a tied parameter's user: the tie (index into Plan::ties) whose copy it reads
  };
  struct Layer {
    size_t unit = 0;             // its unit, in the layout
    std::vector<Param> params;   // in the layer's order
    bool persistent = false;     // kept gathered from its first use after an update until the next
  };
  struct Unit {
    size_t padded = 0, chunk = 0, part_offset = 0;  // as zero::Unit has them
  };
  struct Tie {
    size_t owner_layer = 0, owner_in_unit = 0, size = 0;  // the owner's layer, its place in its unit, elements
  };
  struct Plan {
    std::vector<Layer> layers;
    std::vector<Unit> units;
    std::vector<Tie> ties;
    size_t n = 0;                     // the partition's elements (Σ chunk)
    std::optional<amp::Half> storage; // the parameters' 16-bit type; none: fp32
    ProcessGroup* group = nullptr;    // the ranks over device memory (nullptr: one rank)
  };
  DeviceGather(backend::Device& device, DeviceLayers& layers, Plan plan);
  ~DeviceGather();
  DeviceGather(const DeviceGather&) = delete;
  DeviceGather& operator=(const DeviceGather&) = delete;

  // fp32: the partition on the device [n], the master, which DeviceStep updates in place. Its values change
  // only through it, take_master, load() or between forget() and load().
  float* partition();
  // 16-bit: the partition takes the master's values [n] fp32 (device memory), narrowed to the storage type.
  void take_master(const float* master);
  bool loaded() const { return loaded_; }
  // Host to device: this rank's partition [n] in the storage type (before the first acquire, and after a restore).
  void load(const void* values);
  // Device to host: the partition [n] in the storage type.
  void store(void* values);
  // The partition changed (an update): the gathered layers are stale; the next acquires gather again.
  void updated();
  // The host's values are the latest (a restore): load() before the next acquire.
  void forget();
  // Layer `layer`'s parameters on the device, for its calls (DeviceLayers::provide_params); starts the
  // gather of `next` (the layer the engine acquires after it, when it knows) into the other slot.
  void acquire(size_t layer, std::optional<size_t> next);
  // Partition, landing buffer, slots' views and tie copies (params), by kind.
  const MemoryReport& memory() const { return held_; }

 private:
  struct Slot {
    float* views = nullptr;  // [max layer, aligned]: the views the layer's calls read
    std::optional<size_t> layer;  // the layer it holds (being gathered, or in the views when ready)
    bool ready = false;
    std::unique_ptr<Work> gathering;  // its gather, under way
  };
  void* allocate(size_t bytes);
  void start_gather(size_t layer, size_t slot);
  void finish_gather(size_t slot);              // waits, copies into the views, takes the tie copies
  void revoke(Slot& slot);                      // its layer's views no longer hold (DeviceLayers told)
  void drop(Slot& slot);                        // waits for its gather, if any, and revokes it

  backend::Device& device_;
  DeviceLayers& layers_;
  Plan plan_;
  size_t elem_;                  // bytes per stored element
  std::byte* partition_ = nullptr;
  std::byte* landing_ = nullptr;  // several ranks: [max padded], where the gather under way lands
  // The two slots that the layers not persistent take in turn, then one per persistent layer (at most one
  // gathering of all).
  std::vector<Slot> slots_;
  std::vector<std::optional<size_t>> kept_;   // per layer: its own slot, if persistent
  std::vector<std::vector<size_t>> aligned_;  // per layer: each parameter's place (floats) in a slot's views
  std::vector<float*> tie_copies_;            // per tie: [size]
  std::optional<size_t> current_;             // the slot of the layer not persistent acquired last
  std::vector<void*> owned_;
  MemoryReport held_;
  bool loaded_ = false;
};

}  // namespace ds
