#include "epp/shared_state.h"

#include <algorithm>
#include <utility>

namespace epp {

uint64_t PrefixSinks::Add(std::string_view producer, SharedPrefixBus::Sink sink) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  entries_.push_back(Entry{id, std::string(producer), std::move(sink)});
  return id;
}

void PrefixSinks::Remove(uint64_t id) {
  // Taking the lock waits for a delivery in progress: after Remove the sink is never called.
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(entries_, [id](const Entry& e) { return e.id == id; });
}

size_t PrefixSinks::Deliver(std::string_view producer, std::string_view endpoint, std::span<const uint64_t> hashes,
                            int64_t capacity) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const Entry& e : entries_) {
    if (e.producer != producer) continue;
    e.sink(endpoint, hashes, capacity);
    ++n;
  }
  return n;
}

class PrefixBusHub::MemberBus final : public SharedPrefixBus {
 public:
  MemberBus(PrefixBusHub* hub, int index) : hub_(hub), index_(index) {}
  void Publish(std::string_view producer, std::string_view endpoint, std::span<const uint64_t> hashes,
               int64_t capacity) override {
    hub_->Enqueue(index_, producer, endpoint, hashes, capacity);
  }
  uint64_t Subscribe(std::string_view producer, Sink sink) override { return sinks.Add(producer, std::move(sink)); }
  void Unsubscribe(uint64_t id) override { sinks.Remove(id); }
  PrefixSinks sinks;

 private:
  PrefixBusHub* hub_;
  int index_;
};

PrefixBusHub::PrefixBusHub(int replicas, int64_t delay_us, std::function<int64_t()> now)
    : delay_us_(std::max<int64_t>(0, delay_us)), now_(std::move(now)) {
  for (int r = 0; r < std::max(1, replicas); ++r) members_.push_back(std::make_unique<MemberBus>(this, r));
}

PrefixBusHub::~PrefixBusHub() = default;

SharedPrefixBus* PrefixBusHub::Member(int replica) { return members_.at(static_cast<size_t>(replica)).get(); }

void PrefixBusHub::Enqueue(int from, std::string_view producer, std::string_view endpoint,
                           std::span<const uint64_t> hashes, int64_t capacity) {
  Update u{now_() + delay_us_, from, std::string(producer), std::string(endpoint),
           std::vector<uint64_t>(hashes.begin(), hashes.end()), capacity};
  if (delay_us_ == 0) {
    // No delay: the others learn it at once (as one shared index would).
    for (size_t m = 0; m < members_.size(); ++m)
      if (static_cast<int>(m) != from) members_[m]->sinks.Deliver(u.producer, u.endpoint, u.hashes, u.capacity);
    ++delivered_;
    return;
  }
  queue_.push_back(std::move(u));
}

void PrefixBusHub::DeliverDue(int64_t now_us) {
  while (head_ < queue_.size() && queue_[head_].due_us <= now_us) {
    const Update& u = queue_[head_];
    for (size_t m = 0; m < members_.size(); ++m)
      if (static_cast<int>(m) != u.from) members_[m]->sinks.Deliver(u.producer, u.endpoint, u.hashes, u.capacity);
    ++head_;
    ++delivered_;
  }
  // Reclaim the delivered prefix once it dominates the vector.
  if (head_ > 1024 && head_ * 2 > queue_.size()) {
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
}

}  // namespace epp
