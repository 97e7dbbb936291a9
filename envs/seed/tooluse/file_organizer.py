"""Skill: State Modification. Mechanic: mutation chain on a small file system (create, move, rename, delete; each step depends on the last). Tidy a home folder."""
import random


class FileOrganizerEnv(ToolUseEnv):
    SCENARIO = "You manage files on a small Linux machine. Paths are absolute, like /home/ana/docs/report.txt."
    TOOLS = [
        {"type": "function", "function": {
            "name": "list_dir", "description": "List the folders and files (with sizes) inside a folder.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
        {"type": "function", "function": {
            "name": "make_dir", "description": "Create a new folder; its parent must exist.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
        {"type": "function", "function": {
            "name": "move_file", "description": "Move a file into another folder, keeping its name.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "dest_dir": {"type": "string"}},
                           "required": ["path", "dest_dir"]}}},
        {"type": "function", "function": {
            "name": "rename_file", "description": "Rename a file inside its folder.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "new_name": {"type": "string"}},
                           "required": ["path", "new_name"]}}},
        {"type": "function", "function": {
            "name": "delete_file", "description": "Delete a file permanently.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
        {"type": "function", "function": {
            "name": "delete_dir", "description": "Delete an empty folder.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    ]

    def setup(self, rng):
        user = rng.choice(["ana", "li", "omar", "kofi", "mira"])
        home = f"/home/{user}"
        docs, tmp, archive = home + "/docs", home + "/tmp", home + "/archive"
        logs = rng.sample(["build.log", "server.log", "error.log", "install.log", "debug.log"], rng.randint(2, 3))
        extras = rng.sample(["notes.txt", "draft.md", "todo.txt", "sketch.svg"], rng.randint(1, 2))
        report = rng.choice(["report", "summary", "budget", "plan"])
        year = rng.randint(2019, 2025)
        files = {f"{tmp}/{name}": rng.randint(1, 900) for name in logs + extras}
        files.update({f"{docs}/{report}.txt": rng.randint(5, 90), f"{docs}/cv.pdf": rng.randint(50, 300),
                      f"{home}/photo.jpg": rng.randint(500, 4000)})
        self._state = {"dirs": ["/home", home, docs, tmp], "files": files}
        new_name = f"{report}_{year}.txt"

        def step_by_step(listing, action):  # look at the folder first, then act
            return ("list_dir", {"path": listing}) if not self.called("list_dir", path=listing) else action()

        def first_in_tmp(names):
            return next(n for n in names if f"{tmp}/{n}" in self._state["files"])

        def empty_tmp():
            left = [n for n in extras if f"{tmp}/{n}" in self._state["files"]]
            return ("move_file", {"path": f"{tmp}/{left[0]}", "dest_dir": docs}) if left else ("delete_dir", {"path": tmp})

        return [
            {"text": f"Create a folder named archive in {home}.",
             "check": lambda: archive in self._state["dirs"],
             "next_call": lambda: step_by_step(home, lambda: ("make_dir", {"path": archive}))},
            {"text": f"Move every .log file from {tmp} into {archive}.",
             "check": lambda: all(f"{archive}/{n}" in self._state["files"] for n in logs),
             "next_call": lambda: step_by_step(tmp, lambda: (
                 "move_file", {"path": f"{tmp}/{first_in_tmp(logs)}", "dest_dir": archive}))},
            {"text": f"Rename {docs}/{report}.txt to {new_name}.",
             "check": lambda: f"{docs}/{new_name}" in self._state["files"],
             "next_call": lambda: ("rename_file", {"path": f"{docs}/{report}.txt", "new_name": new_name})},
            {"text": f"Move the files still in {tmp} into {docs}, then delete the empty {tmp} folder.",
             "check": lambda: tmp not in self._state["dirs"] and all(f"{docs}/{n}" in self._state["files"] for n in extras),
             "next_call": empty_tmp},
        ]

    def _need_dir(self, path):
        if path.rstrip("/") not in self._state["dirs"]:
            raise ValueError(f"no such folder: {path}")
        return path.rstrip("/")

    def _need_file(self, path):
        if path not in self._state["files"]:
            raise ValueError(f"no such file: {path}")
        return path

    def tool_list_dir(self, path):
        path = self._need_dir(path)
        dirs = [d.rsplit("/", 1)[1] for d in self._state["dirs"] if d.rsplit("/", 1)[0] == path]
        files = [{"name": f.rsplit("/", 1)[1], "size": size} for f, size in self._state["files"].items()
                 if f.rsplit("/", 1)[0] == path]
        return {"path": path, "dirs": sorted(dirs), "files": sorted(files, key=lambda f: f["name"])}

    def tool_make_dir(self, path):
        path = path.rstrip("/")
        if path in self._state["dirs"] or path in self._state["files"]:
            raise ValueError(f"{path} already exists")
        self._need_dir(path.rsplit("/", 1)[0])
        self._state["dirs"].append(path)
        return f"created {path}"

    def tool_move_file(self, path, dest_dir):
        self._need_file(path)
        target = self._need_dir(dest_dir) + "/" + path.rsplit("/", 1)[1]
        if target in self._state["files"]:
            raise ValueError(f"{target} already exists")
        self._state["files"][target] = self._state["files"].pop(path)
        return f"moved to {target}"

    def tool_rename_file(self, path, new_name):
        self._need_file(path)
        if "/" in new_name or not new_name:
            raise ValueError("new_name must be a plain file name")
        target = path.rsplit("/", 1)[0] + "/" + new_name
        if target in self._state["files"]:
            raise ValueError(f"{target} already exists")
        self._state["files"][target] = self._state["files"].pop(path)
        return f"renamed to {target}"

    def tool_delete_file(self, path):
        del self._state["files"][self._need_file(path)]
        return f"deleted {path}"

    def tool_delete_dir(self, path):
        path = self._need_dir(path)
        if any(p.startswith(path + "/") for p in list(self._state["files"]) + self._state["dirs"]):
            raise ValueError(f"{path} is not empty")
        self._state["dirs"].remove(path)
        return f"deleted folder {path}"
