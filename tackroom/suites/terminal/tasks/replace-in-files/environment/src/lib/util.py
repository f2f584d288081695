from lib import foo_api


def call():
    return foo_api.get('x')
