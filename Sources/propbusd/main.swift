print("propbusd")
