from lib import foo_api

foo_api.run()
