"""What the whole suite shares: the project builder (`project`), the commands as a user runs them
(`cli`) and small file-tree helpers (`files`). Tests import from here; `tests/conftest.py` keeps
re-exporting the old names (`make_project`, `run_cli`, ...) so a test written against them still
works."""
