"""Skill: Optimization. Mechanic: partial rewards (a valid but costlier route earns credit scaled by how close it is). Find the cheapest route in a toll-road network."""
import heapq
import random
import re


def last_boxed(text):
    """Return the content of the last complete \\boxed{...} in text (nested braces allowed), or None."""
    end = len(text)
    while (start := text.rfind("\\boxed{", 0, end)) >= 0:
        depth = 0
        for j in range(start + 6, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[start + 7:j].strip()
        end = start
    return None


def cheapest(roads, start, goal):
    """Dijkstra: (cost, route) of a cheapest route from start to goal."""
    queue, seen = [(0, [start])], set()
    while queue:
        cost, route = heapq.heappop(queue)
        town = route[-1]
        if town == goal:
            return cost, route
        if town in seen:
            continue
        seen.add(town)
        for (a, b), toll in sorted(roads.items()):
            if town in (a, b):
                nxt = b if town == a else a
                if nxt not in seen:
                    heapq.heappush(queue, (cost + toll, route + [nxt]))
    return None


class CheapestRouteEnv:
    TOWNS = "ABCDEFG"

    def __init__(self, max_turns=4, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        while True:
            towns = list(self.TOWNS)
            rng.shuffle(towns)
            roads = {}
            for i in range(1, len(towns)):  # a random tree keeps every town reachable
                roads[tuple(sorted((towns[i], rng.choice(towns[:i]))))] = rng.randint(1, 9)
            for _ in range(5):  # plus a few shortcuts
                a, b = sorted(rng.sample(towns, 2))
                roads[(a, b)] = rng.randint(1, 9)
            self.roads = roads
            self.start, self.goal = rng.sample(towns, 2)
            self.best_cost, self.best_route = cheapest(roads, self.start, self.goal)
            hop_roads = {k: 1 for k in roads}  # the route with the fewest roads should not be the cheapest
            fewest_hops = cheapest(hop_roads, self.start, self.goal)[1]
            if len(self.best_route) >= 4 and self.cost(fewest_hops) > self.best_cost:
                break
        self.turn, self.over = 0, False
        lines = "\n".join(f"{a} - {b}: toll {t}" for (a, b), t in sorted(self.roads.items()))
        obs = ("Two-way toll roads connect these towns:\n" + lines
               + f"\n\nDrive from {self.start} to {self.goal} paying the least total toll. "
               f"Answer with the towns in order, e.g. \\boxed{{{self.start}-X-Y-{self.goal}}}. "
               f"You have {self.max_turns} tries.")
        return obs, {"turn": 0}

    def cost(self, route):
        """Total toll of a route, or None if some hop has no road."""
        legs = [tuple(sorted(leg)) for leg in zip(route, route[1:])]
        return sum(self.roads[leg] for leg in legs) if all(leg in self.roads for leg in legs) else None

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        route = re.findall(r"[A-G]", (last_boxed(action) or "").upper())
        cost = self.cost(route) if len(route) >= 2 else None
        reward = 0.0
        if len(route) < 2 or route[0] != self.start or route[-1] != self.goal:
            obs, reward = f"Format error: list towns from {self.start} to {self.goal}, e.g. \\boxed{{{self.start}-C-{self.goal}}}.", -0.1
        elif cost is None:
            obs = "That route uses a road that does not exist."
        elif cost == self.best_cost:
            self.over = True
            return f"Cheapest route found: toll {cost}.", 1.0, True, False, {"turn": self.turn}
        else:
            obs, reward = f"That route costs {cost}; a cheaper one exists.", round(0.3 * self.best_cost / cost, 3)
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of tries. Cheapest: {self.solution()} (toll {self.best_cost}).", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        return "-".join(self.best_route)

    def close(self):
        pass
