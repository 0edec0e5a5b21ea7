#include "engine/scheduler/scheduler.h"

#include <algorithm>
#include <set>

#include "engine/kv/blocks.h"

namespace gpeserve::scheduler {

bool IsLongRead(const SchedulerConfig& config, const Candidate& c) {
  return c.runnable && !c.write && c.remaining > config.long_read_tokens;
}

Plan Schedule(const SchedulerConfig& config, const std::vector<Candidate>& candidates,
              const KvRoom& kv, LongReadBudget long_read_budget) {
  using kv::BlocksFor;
  const int block_size = kv.block_size;
  std::vector<const Candidate*> order;
  for (const Candidate& c : candidates) order.push_back(&c);
  auto rank = [&](const Candidate* c) {
    // Running writes, running reads, waiting sessions, then long reads.
    if (IsLongRead(config, *c)) return 3;
    return !c->admitted ? 2 : c->write ? 0 : 1;
  };
  std::stable_sort(order.begin(), order.end(), [&](const Candidate* a, const Candidate* b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    if (a->admitted && a->last_served != b->last_served) return a->last_served < b->last_served;
    return a->admit_order < b->admit_order;
  });

  Plan plan;
  std::set<int64_t> planned, preempted;
  int64_t budget = config.max_batch_tokens;
  int64_t free = kv.free_blocks;
  for (const Candidate* c : order) {
    if (static_cast<int>(plan.pieces.size()) >= config.max_sessions_per_step) break;
    if (!c->runnable || preempted.contains(c->id)) continue;
    const bool long_read = IsLongRead(config, *c);
    // Paced: long reads share a budget, one with other pieces in the step and one without.
    const int64_t long_budget =
        plan.pieces.size() > static_cast<size_t>(plan.long_reads)
            ? long_read_budget.with_others
            : (long_read_budget.alone < 0 ? -1 : std::max<int64_t>(1, long_read_budget.alone));
    const bool paced = long_read && long_budget >= 0;
    if (paced && long_budget <= plan.long_read_tokens) continue;
    if (c->remaining > 0 && budget <= 0) break;
    int64_t tokens = std::min(c->remaining, budget);
    if (paced) tokens = std::min(tokens, long_budget - plan.long_read_tokens);
    const int64_t least = std::min(c->remaining, c->min_tokens);
    if (tokens < least) {
      // Over the whole budget: alone in a step of its own; otherwise in a later step.
      if (!plan.pieces.empty() || least <= config.max_batch_tokens) continue;
      tokens = least;
    }
    if (!c->admitted && kv.total_blocks > 0) {
      // Admission waits until the piece fits whole, so a piece larger than the whole cache is
      // cut to it (the session then grows until it is alone and short: never_fit); one that
      // cannot be cut that far can never run.
      const int64_t room = kv.total_blocks * block_size + c->free_slots;
      if (least > room) {
        preempted.insert(c->id);
        plan.never_fit.push_back(c->id);
        continue;
      }
      tokens = std::min(tokens, room);
    }
    auto fits = [&](int64_t n) { return BlocksFor(n, c->free_slots, block_size) <= free; };
    if (!fits(tokens)) {
      if (!c->admitted) continue;  // admission waits for free blocks
      // Preempt the most recently admitted running session not planned in this step until
      // this piece fits, or until this session is the victim itself.
      while (!fits(tokens)) {
        const Candidate* victim = nullptr;
        for (const Candidate& other : candidates) {
          if (!other.admitted || planned.contains(other.id) || preempted.contains(other.id)) {
            continue;
          }
          if (victim == nullptr || other.admit_order > victim->admit_order) victim = &other;
        }
        if (victim == nullptr) break;
        preempted.insert(victim->id);
        // Alone in the cache: every block in use is its own, and no other session holds one (a
        // shared prompt-prefix block counts in every holder's blocks_held: the victim's own and
        // the free ones can make the whole cache while another session shares its prefix, and
        // then its piece may fit once that one has moved on). Blocks that earlier victims of
        // this step free count from the next step only: they may be shared prefix blocks that
        // stay held, so counting them here could end a session that fits.
        const bool others_hold =
            std::any_of(candidates.begin(), candidates.end(), [victim](const Candidate& other) {
              return other.id != victim->id && other.blocks_held > 0;
            });
        const bool alone = kv.total_blocks > 0 && !others_hold &&
                           victim->blocks_held + kv.free_blocks >= kv.total_blocks;
        (alone ? plan.never_fit : plan.preempted).push_back(victim->id);
        if (victim == c) break;
        free += victim->blocks_held;
      }
      if (preempted.contains(c->id)) continue;
      // Still short (nothing left to preempt): take what fits.
      while (tokens > 0 && !fits(tokens)) --tokens;
      if (tokens < least || (tokens == 0 && c->remaining > 0)) continue;
    }
    free -= BlocksFor(tokens, c->free_slots, block_size);
    budget -= tokens;
    planned.insert(c->id);
    plan.pieces.push_back({c->id, tokens});
    if (long_read) {
      ++plan.long_reads;
      plan.long_read_tokens += tokens;
    }
  }
  return plan;
}

}  // namespace gpeserve::scheduler
