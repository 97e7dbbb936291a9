"""Skill: Tool Selection. Mechanic: pick the right device and the matching tool among look-alike tools (each set_* tool only works on one device kind). Smart-home assistant."""
import random

ROOMS = {  # room -> device kinds found there
    "living room": ["light", "thermostat", "blinds", "speaker"],
    "bedroom": ["light", "thermostat", "blinds"],
    "kitchen": ["light", "lock", "speaker"],
    "office": ["light", "thermostat", "blinds"],
    "hallway": ["light", "lock"],
}
SETTING = {"light": ("set_brightness", "percent"), "thermostat": ("set_temperature", "celsius"),
           "blinds": ("set_blinds", "open_percent"), "lock": ("set_lock", "locked"), "speaker": ("set_volume", "level")}


def device_tool(name, description, arg, arg_type):
    """Schema of a tool that changes one setting of one device."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {"device_id": {"type": "string"}, arg: {"type": arg_type}},
        "required": ["device_id", arg]}}}


class SmartHomeEnv(ToolUseEnv):
    SCENARIO = "You are a smart-home assistant. Devices are addressed by id; list a room to find them."
    TOOLS = [
        {"type": "function", "function": {
            "name": "list_devices", "description": "Devices in a room: id, kind and name.",
            "parameters": {"type": "object", "properties": {"room": {"type": "string", "enum": sorted(ROOMS)}},
                           "required": ["room"]}}},
        {"type": "function", "function": {
            "name": "get_device", "description": "Current state of a device.",
            "parameters": {"type": "object", "properties": {"device_id": {"type": "string"}}, "required": ["device_id"]}}},
        device_tool("set_brightness", "Set a light's brightness, 0-100 percent.", "percent", "integer"),
        device_tool("set_temperature", "Set a thermostat's target temperature in degrees Celsius.", "celsius", "number"),
        device_tool("set_blinds", "Open blinds to a percentage (0 = closed).", "open_percent", "integer"),
        device_tool("set_lock", "Lock (true) or unlock (false) a door lock.", "locked", "boolean"),
        device_tool("set_volume", "Set a speaker's volume, 0-10.", "level", "integer"),
    ]

    def setup(self, rng):
        ids = rng.sample(range(10, 100), sum(len(kinds) for kinds in ROOMS.values()))
        devices = {}
        for room, kinds in ROOMS.items():
            for kind in kinds:
                value = {"light": rng.randint(40, 100), "thermostat": rng.randint(17, 21), "blinds": rng.randint(30, 100),
                         "lock": False, "speaker": rng.randint(5, 9)}[kind]
                name = {"lock": "back door" if room == "kitchen" else "front door"}.get(kind, f"{room} {kind}")
                devices[f"dev-{ids[len(devices)]}"] = {"room": room, "kind": kind, "name": name, "value": value}
        self._state = {"devices": devices}
        jobs = rng.sample([(d, info) for d, info in devices.items()], 4)

        def job(device, info):
            kind, room = info["kind"], info["room"]
            tool, arg = SETTING[kind]
            goal = {"light": rng.choice([10, 20, 30]), "thermostat": rng.randint(22, 24), "blinds": 0,
                    "lock": True, "speaker": rng.randint(1, 3)}[kind]
            text = {"light": f"Dim the {room} light to {goal}%.",
                    "thermostat": f"It is chilly in the {room}; set it to {goal} degrees.",
                    "blinds": f"Close the {room} blinds completely.", "lock": f"Lock the {info['name']}.",
                    "speaker": f"Turn the {room} speaker down to volume {goal}."}[kind]
            return {"text": text,
                    "check": lambda: self._state["devices"][device]["value"] == goal,
                    "next_call": lambda: ("list_devices", {"room": room}) if not self.called("list_devices", room=room)
                    else (tool, {"device_id": device, arg: goal})}

        return [job(d, info) for d, info in jobs]

    def _device(self, device_id, kind):
        info = self._state["devices"].get(device_id)
        if info is None:
            raise ValueError(f"no device '{device_id}'")
        if info["kind"] != kind:
            raise ValueError(f"{device_id} is a {info['kind']}, not a {kind}")
        return info

    def tool_list_devices(self, room):
        return [{"device_id": d, "kind": i["kind"], "name": i["name"]}
                for d, i in self._state["devices"].items() if i["room"] == room]

    def tool_get_device(self, device_id):
        info = self._state["devices"].get(device_id)
        if info is None:
            raise ValueError(f"no device '{device_id}'")
        return {"device_id": device_id, **info}

    def tool_set_brightness(self, device_id, percent):
        if not 0 <= percent <= 100:
            raise ValueError("percent must be 0-100")
        self._device(device_id, "light")["value"] = percent
        return f"{device_id} brightness {percent}%"

    def tool_set_temperature(self, device_id, celsius):
        if not 10 <= celsius <= 30:
            raise ValueError("celsius must be 10-30")
        self._device(device_id, "thermostat")["value"] = celsius
        return f"{device_id} target {celsius} C"

    def tool_set_blinds(self, device_id, open_percent):
        if not 0 <= open_percent <= 100:
            raise ValueError("open_percent must be 0-100")
        self._device(device_id, "blinds")["value"] = open_percent
        return f"{device_id} open {open_percent}%"

    def tool_set_lock(self, device_id, locked):
        self._device(device_id, "lock")["value"] = locked
        return f"{device_id} {'locked' if locked else 'unlocked'}"

    def tool_set_volume(self, device_id, level):
        if not 0 <= level <= 10:
            raise ValueError("level must be 0-10")
        self._device(device_id, "speaker")["value"] = level
        return f"{device_id} volume {level}"
