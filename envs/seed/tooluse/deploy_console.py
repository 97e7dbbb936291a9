"""Skill: Error Recovery. Mechanic: tools fail with informative errors (locked service, cluster quota, wrong service name) that must be fixed and retried. Deployment console."""
import random


def version_key(version):
    return tuple(int(part) for part in version.split("."))


class DeployConsoleEnv(ToolUseEnv):
    SCENARIO = "You operate a small cluster through its deployment console. Read error messages carefully."
    TOOLS = [
        {"type": "function", "function": {
            "name": "list_services", "description": "Services with their running version and replica count.",
            "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {
            "name": "list_versions", "description": "Versions of a service that can be deployed.",
            "parameters": {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}}},
        {"type": "function", "function": {
            "name": "deploy", "description": "Deploy a version of a service.",
            "parameters": {"type": "object", "properties": {"service": {"type": "string"}, "version": {"type": "string"}},
                           "required": ["service", "version"]}}},
        {"type": "function", "function": {
            "name": "close_ticket", "description": "Close a maintenance ticket.",
            "parameters": {"type": "object", "properties": {"ticket_id": {"type": "string"}}, "required": ["ticket_id"]}}},
        {"type": "function", "function": {
            "name": "scale", "description": "Set the number of replicas of a service (1 to 10).",
            "parameters": {"type": "object", "properties": {"service": {"type": "string"}, "replicas": {"type": "integer"}},
                           "required": ["service", "replicas"]}}},
        {"type": "function", "function": {
            "name": "restart", "description": "Restart a service.",
            "parameters": {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}}},
    ]

    def setup(self, rng):
        names = rng.sample(["payments-api", "search-api", "web-frontend", "auth-service", "mailer-queue"], 3)
        services = {n: {"version": f"{rng.randint(1, 3)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}",
                        "replicas": rng.randint(2, 4), "restarts": 0} for n in names + ["batch-worker"]}
        services["batch-worker"]["replicas"] = rng.randint(4, 6)
        deploy_to, grow, bounce = names
        major, minor = version_key(services[deploy_to]["version"])[:2]
        versions = {f"{major}.{minor}.{rng.randint(0, 9)}", f"{major}.{minor + 1}.{rng.randint(0, 9)}",
                    f"{major}.{minor + rng.randint(2, 12)}.0"}
        if rng.random() < 0.4:
            versions.add(f"{major + 1}.0.{rng.randint(0, 3)}")
        versions = sorted(versions - {services[deploy_to]["version"]})
        newest = max(versions, key=version_key)
        rng.shuffle(versions)  # shown unsorted: "2.10.0" is newer than "2.9.4"
        ticket = f"OPS-{rng.randint(100, 999)}"
        used = sum(s["replicas"] for s in services.values())
        target = services[grow]["replicas"] + rng.randint(2, 3)
        quota = used + target - services[grow]["replicas"] - rng.randint(1, 2)  # needs batch-worker scaled down
        self._state = {"services": services, "versions": {deploy_to: versions}, "quota": quota,
                       "tickets": {ticket: {"service": deploy_to, "open": True}}}
        short = bounce.split("-")[0]

        def deploy_next():
            if not self.called("list_versions", service=deploy_to):
                return "list_versions", {"service": deploy_to}
            if self._state["tickets"][ticket]["open"]:
                if not self.called("deploy", service=deploy_to):
                    return "deploy", {"service": deploy_to, "version": newest}  # fails, naming the ticket
                return "close_ticket", {"ticket_id": ticket}
            return "deploy", {"service": deploy_to, "version": newest}

        def scale_next():
            if not self.called("scale", service=grow):
                return "scale", {"service": grow, "replicas": target}  # fails on the quota
            if self._in_use() - services[grow]["replicas"] + target > quota:
                return "scale", {"service": "batch-worker", "replicas": 1}
            return "scale", {"service": grow, "replicas": target}

        def restart_next():
            if not self.called("restart", service=short):
                return "restart", {"service": short}  # fails: not the full name
            if not self.called("list_services"):
                return "list_services", {}
            return "restart", {"service": bounce}

        return [
            {"text": f"Deploy the newest available version of {deploy_to}.",
             "check": lambda: services[deploy_to]["version"] == newest, "next_call": deploy_next},
            {"text": f"Scale {grow} to {target} replicas. If the cluster quota gets in the way, "
                     "you may scale batch-worker down to 1 replica.",
             "check": lambda: services[grow]["replicas"] == target, "next_call": scale_next},
            {"text": f"Restart the {short} service.",
             "check": lambda: services[bounce]["restarts"] > 0, "next_call": restart_next},
        ]

    def _in_use(self):
        return sum(s["replicas"] for s in self._state["services"].values())

    def _service(self, name):
        if name not in self._state["services"]:
            raise ValueError(f"unknown service '{name}'")
        return self._state["services"][name]

    def tool_list_services(self):
        return [{"name": n, "version": s["version"], "replicas": s["replicas"]} for n, s in self._state["services"].items()]

    def tool_list_versions(self, service):
        self._service(service)
        return self._state["versions"].get(service, [])

    def tool_deploy(self, service, version):
        svc = self._service(service)
        if version not in self._state["versions"].get(service, []):
            raise ValueError(f"version {version} of {service} is not available")
        for ticket_id, t in self._state["tickets"].items():
            if t["service"] == service and t["open"]:
                raise ValueError(f"{service} is locked by open maintenance ticket {ticket_id}; close it first")
        svc["version"] = version
        return f"{service} now runs {version}"

    def tool_close_ticket(self, ticket_id):
        ticket = self._state["tickets"].get(ticket_id)
        if ticket is None or not ticket["open"]:
            raise ValueError(f"no open ticket '{ticket_id}'")
        ticket["open"] = False
        return f"closed {ticket_id}"

    def tool_scale(self, service, replicas):
        svc = self._service(service)
        if not 1 <= replicas <= 10:
            raise ValueError("replicas must be between 1 and 10")
        if self._in_use() - svc["replicas"] + replicas > self._state["quota"]:
            raise ValueError(f"quota exceeded: the cluster allows {self._state['quota']} replicas in total "
                             f"and {self._in_use()} are in use")
        svc["replicas"] = replicas
        return f"{service} scaled to {replicas} replicas"

    def tool_restart(self, service):
        self._service(service)["restarts"] += 1
        return f"{service} restarted"
