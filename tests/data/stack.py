class Stack:
    """A last-in, first-out stack."""

    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.

    def __len__(self):
        return len(self.items)
