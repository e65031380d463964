"""What the tests share: a project copy driven by the CLI (`loop`), the report's hand-built state
(`report_state`) and tiny diffusers pipelines (`tiny_pipelines`). Imported as `tests.helpers.*`: pytest's
importlib mode registers the `tests` package from the rootdir, so nothing is put on `sys.path`."""
