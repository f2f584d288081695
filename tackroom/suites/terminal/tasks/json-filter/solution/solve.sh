#!/bin/bash
python3 -c 'import json; o = json.load(open("orders.json")); json.dump(sorted([x for x in o if x["status"] == "active"], key=lambda x: x["id"]), open("active_orders.json", "w"))'
