def load_run(path): raise NotImplementedError
