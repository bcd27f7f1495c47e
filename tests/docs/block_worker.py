"""One interpreter that runs the documentation's Python blocks and checks its recipes.

Started by ``tests/docs/document_runs.py``; reads one JSON request a line on stdin and
answers one JSON line on the stdout it started with. Each document has its own
namespace, as a reader pasting a page's blocks into one session would, and its own
folder, the working directory while its blocks run. One interpreter serves every
document so that PyTorch and TensorFlow are imported once (about 15 s of CPU on 2
cores), not once per page. What a block prints goes to the request's log file.

Requests: ``{"kind": "python", "document", "folder", "where", "code", "log"}`` runs the
code; ``{"kind": "recipe", "folder", "where", "file", "base", "log"}`` checks the recipe
``file`` as ``deep500 run`` does before it runs anything, laid over the recipe ``base``
first when the block is a fragment. Answers: ``{"ok": true}`` or ``{"ok": false,
"error": traceback}``.
"""
import json
import os
import sys
import traceback


def check_recipe(request: dict) -> None:
    from deep500.recipe.recipe_yaml import read_recipe_yaml
    from deep500.recipe.schema import parse_recipe
    raw = read_recipe_yaml(request["file"])
    path = request["file"]
    if request.get("base"):
        raw = laid_over(read_recipe_yaml(request["base"]), raw)
        path = request["base"]  # relative paths in the base resolve beside it
    parse_recipe(raw, path)


def laid_over(base, fragment):
    """``fragment`` laid over ``base``: mappings merge key by key, anything else
    replaces."""
    if not (isinstance(base, dict) and isinstance(fragment, dict)):
        return fragment
    merged = dict(base)
    for key, value in fragment.items():
        merged[key] = laid_over(base.get(key), value)
    return merged


def serve(requests, replies) -> None:
    namespaces = {}
    for line in requests:
        request = json.loads(line)
        with open(request["log"], "w") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        os.chdir(request["folder"])
        sys.path[0] = request["folder"]  # a block imports what an earlier one wrote
        try:
            if request["kind"] == "python":
                namespace = namespaces.setdefault(request["document"],
                                                  {"__name__": "__main__"})
                exec(compile(request["code"], request["where"], "exec"), namespace)
            else:
                check_recipe(request)
            reply = {"ok": True}
        except BaseException:  # SystemExit and KeyboardInterrupt are a block's failure too
            reply = {"ok": False, "error": traceback.format_exc()}
        sys.stdout.flush()
        sys.stderr.flush()
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve(sys.stdin, os.fdopen(os.dup(1), "w"))
