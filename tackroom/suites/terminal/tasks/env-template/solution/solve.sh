#!/bin/bash
cp app.env.template app.env
while IFS='=' read -r k v; do sed -i "s|\${$k}|$v|g" app.env; done < values.txt
