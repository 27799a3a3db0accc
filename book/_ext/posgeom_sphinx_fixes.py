"""Two upstream bugs that show in a browser or break the single-page (PDF) build.

1. sphinx-thebe adds an inline ``<script>const THEBE_JS_URL = ...</script>`` after the builder started;
   Sphinx 7.4 then lists it twice (once with filename None, once with ''), so every page throws
   "Identifier 'THEBE_JS_URL' has already been declared". Drop the duplicate from each page's scripts.
2. sphinx-exercise registers translation handlers for the ``singlehtml`` builder, so Sphinx no longer
   falls back to the ``html`` handlers for that builder, and sphinx-proof's nodes (registered for
   ``html`` only) crash ``--builder singlehtml``. Give ``singlehtml`` every ``html`` handler it lacks.
"""


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        key = (getattr(js, "filename", js) or "", getattr(js, "priority", 500),
               tuple(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


def _singlehtml_handlers(app):
    handlers = app.registry.translation_handlers
    if app.builder.name == "singlehtml" and "singlehtml" in handlers:
        for node, pair in handlers.get("html", {}).items():
            handlers["singlehtml"].setdefault(node, pair)


def setup(app):
    app.connect("builder-inited", _singlehtml_handlers)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
