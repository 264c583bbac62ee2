#!/usr/bin/env python3
"""The corpus of the trained tiny hybrid model (models/tiny-trained), made here from a seed.

Nothing is downloaded: every document comes from the grammar below and Python's seeded
`random.Random`, so the same seed gives the same corpus on every machine (Python >= 3.2 keeps
`random.Random(seed)` sequences stable across versions for the methods used here).

What the corpus must teach a model of a few million parameters in a few million tokens
(issue 17, "The corpus"):
  - fluent, varied text under sampling: stories whose every sentence fills three or more slots
    from lists of tens of words, so that a sentence repeated verbatim is abnormal;
  - dependencies longer than one GDN chunk (64 tokens) and far longer than the conv window (4):
    "memory" documents state facts, then tell an unrelated story of 40-400 tokens, then ask about
    the facts; counting and numbered lists run for hundreds of tokens and end with a total;
  - chat turns in the Qwen3.5 ChatML format with short thinking blocks (spec model.md §7.2),
    the seed's own prompt "What is 2+2?" among them, thinking on and off;
  - a held-out set of questions with known answers (`heldout()`), drawn from a separate seed,
    so that task accuracy is measured on instances the model never saw.

Usage (also imported by tools/train_tiny_hybrid.py):
  python3 tools/tiny_corpus.py --docs 200 --seed 1          # print a sample of documents
  python3 tools/tiny_corpus.py --heldout models/tiny-trained/heldout.json
"""

import argparse
import json
import random
import sys

# --------------------------------------------------------------------------------------------
# Word lists. Every list is long enough that a sentence drawn twice is unlikely.
NAMES_F = ["Mira", "Anna", "Lena", "Sara", "Nora", "Ida", "Ella", "Rosa", "Vera", "Lina", "Maya", "Tessa",
           "Alma", "Clara", "Dora", "Greta", "Hana", "Iris", "Julia", "Kira", "Lucy", "Mona", "Nina", "Olga",
           "Paula", "Ruth", "Stella", "Tara", "Uma", "Wanda", "Zoe", "Elsa", "Freya", "Ivy", "June", "Luna"]
NAMES_M = ["Tom", "Ben", "Leo", "Max", "Sam", "Oskar", "Felix", "Hugo", "Ivan", "Jonas", "Karl", "Liam",
           "Milo", "Noah", "Otto", "Paul", "Rudi", "Simon", "Theo", "Victor", "Walter", "Adam", "Bruno",
           "Carl", "David", "Emil", "Finn", "Gus", "Henry", "Jack", "Kai", "Lars", "Marco", "Nils", "Omar", "Pete"]
PLACES = ["Oslo", "Lima", "Cairo", "Paris", "Rome", "Tokyo", "Quito", "Dakar", "Hanoi", "Perth", "Bern",
          "Riga", "Porto", "Kyoto", "Milan", "Delhi", "Sofia", "Seoul", "Accra", "Dublin", "Vienna", "Prague",
          "Madrid", "Athens", "Berlin", "Lisbon", "Warsaw", "Havana", "Nairobi", "Bergen", "Malmo", "Turin",
          "Leeds", "Lyon", "Graz", "Split", "Cork", "Basel", "Tartu", "Vilnius"]
ANIMALS = ["cat", "dog", "fox", "owl", "goat", "horse", "rabbit", "mouse", "duck", "bear", "wolf", "deer",
           "frog", "crow", "lamb", "pig", "cow", "hen", "swan", "otter", "seal", "whale", "tiger", "lion",
           "panda", "camel", "zebra", "parrot", "turtle", "snail", "beaver", "badger", "donkey", "moose"]
OBJECTS = ["lamp", "book", "key", "map", "box", "cup", "hat", "coat", "bell", "kite", "ring", "coin",
           "rope", "shell", "stone", "basket", "candle", "clock", "drum", "flute", "jar", "ladder", "mirror",
           "needle", "pillow", "quilt", "radio", "scarf", "spoon", "tent", "violin", "wagon", "whistle",
           "bucket", "compass", "feather", "glove", "hammer", "kettle", "letter", "paintbrush", "sail", "ticket"]
COLORS = ["red", "blue", "green", "yellow", "white", "black", "brown", "grey", "orange", "purple", "pink", "silver"]
ADJS = ["small", "old", "quiet", "busy", "bright", "dark", "cold", "warm", "windy", "sunny", "muddy", "tall",
        "narrow", "wide", "strange", "lovely", "noisy", "sleepy", "happy", "tired", "brave", "clever", "kind",
        "shy", "proud", "gentle", "curious", "careful", "lucky", "patient", "cheerful", "lonely", "hungry"]
PLACE_NOUNS = ["market", "river", "forest", "harbour", "bridge", "garden", "library", "bakery", "station",
               "school", "farm", "hill", "lake", "tower", "square", "meadow", "castle", "village", "beach",
               "museum", "workshop", "orchard", "valley", "island", "cave", "field", "mill", "road", "park"]
FOODS = ["bread", "soup", "apples", "cheese", "rice", "honey", "pears", "cake", "plums", "fish", "beans",
         "carrots", "pie", "eggs", "nuts", "grapes", "lemons", "pasta", "milk", "tea", "cherries", "oats"]
JOBS = ["baker", "farmer", "sailor", "painter", "teacher", "doctor", "miller", "fisher", "tailor", "singer",
        "gardener", "builder", "writer", "potter", "driver", "nurse", "cook", "pilot", "guard", "weaver"]
TIMES = ["In the morning", "At noon", "That evening", "Late at night", "On the next day", "After lunch",
         "Before dawn", "On Sunday", "In the spring", "In the winter", "At sunset", "A week later",
         "On the third day", "Soon after", "Some time later", "At first light", "Before supper"]
WEATHER = ["it rained", "the sun was shining", "snow began to fall", "a cold wind blew", "fog covered the hills",
           "the sky was clear", "thunder rolled far away", "the air was warm", "a light rain fell", "the stars came out"]
VERBS_PAST = [("found", "a"), ("carried", "the"), ("painted", "the"), ("fixed", "the"), ("sold", "a"),
              ("bought", "a"), ("lost", "the"), ("hid", "the"), ("cleaned", "the"), ("opened", "the"),
              ("wrapped", "the"), ("borrowed", "a"), ("dropped", "the"), ("lifted", "the"), ("counted", "the")]
FEELINGS = ["glad", "worried", "surprised", "proud", "sad", "calm", "excited", "sleepy", "puzzled", "grateful"]
SAYINGS = ["Let us go home", "I can help you", "This is wonderful", "We must hurry", "Look at the sky",
           "I have an idea", "Do not be afraid", "Thank you very much", "What a day", "I will come back soon",
           "We did it together", "It is getting late", "The water is cold", "I like this place",
           "Follow me", "Be careful", "Good morning", "That was fun", "Let me try", "I am hungry"]
ANIMAL_PLURAL = {"mouse": "mice", "sheep": "sheep", "deer": "deer", "moose": "moose", "fish": "fish",
                 "fox": "foxes", "wolf": "wolves", "goose": "geese", "box": "boxes", "glass": "glasses"}
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve"]


def plural(noun):
    if noun in ANIMAL_PLURAL:
        return ANIMAL_PLURAL[noun]
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def an(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


class Person:
    def __init__(self, r):
        self.female = r.random() < 0.5
        self.name = r.choice(NAMES_F if self.female else NAMES_M)
        self.job = r.choice(JOBS)
        self.home = r.choice(PLACES)
        self.he = "she" if self.female else "he"
        self.his = "her" if self.female else "his"
        self.him = "her" if self.female else "him"


def other_person(r, avoid):
    for _ in range(20):
        p = Person(r)
        if p.name not in avoid:
            return p
    return p


# --------------------------------------------------------------------------------------------
# Stories: a protagonist, a companion, an object and a place, then sentences from many frames.
MOVES = ["walked", "went", "ran", "hurried", "wandered", "rode", "climbed", "drove", "sailed", "marched"]
GIVES = ["gave", "handed", "brought", "sent", "offered", "showed"]
SAYS = ["said", "called", "whispered", "shouted", "laughed", "sang", "answered", "cried"]
ASKS = ["asked", "wondered", "called", "whispered"]
QUESTIONS = ["Where did it go", "Can you hear that", "Is it far", "Who is there", "Shall we wait",
             "Why is it so quiet", "What is that noise", "Can I come too", "Is this the way", "Are you ready"]
LOOKS = ["smiled", "laughed", "nodded", "sighed", "waved", "listened", "waited", "looked around"]
THINGS_DONE = ["read a book", "baked some bread", "fed the birds", "mended a net", "sang a song",
               "painted a picture", "planted seeds", "swept the floor", "wrote a letter", "lit a fire",
               "picked berries", "fixed a chair", "washed the cups", "tied a knot", "played the flute"]


def story_sentence(r, p, friends, pet, pet_name, obj):
    place = r.choice(PLACE_NOUNS)
    f = r.choice(friends)
    who = r.choice([p.name, p.he.capitalize()]) if r.random() < 0.5 else p.name
    pet_ref = r.choice([pet_name, f"the {pet}", pet_name, f"{pet_name} the {pet}"])
    col, adj, o2 = r.choice(COLORS), r.choice(ADJS), r.choice(OBJECTS)
    frames = [
        lambda: f"{r.choice(TIMES)}, {p.name} {r.choice(MOVES)} to the {adj} {place} with {pet_ref}.",
        lambda: f"{r.choice(TIMES)}, {r.choice(WEATHER)}, and {p.name} stayed {r.choice(['near', 'at', 'inside', 'behind'])} the {place}.",
        lambda: f"{who} {r.choice(VERBS_PAST)[0]} {an(col)} {o2} {r.choice(['by', 'near', 'at', 'behind'])} the {place}.",
        lambda: f"{f.name} the {f.job} {r.choice(GIVES)} {p.name} some {r.choice(FOODS)} and {r.choice(FOODS)}.",
        lambda: f"\"{r.choice(SAYINGS)},\" {r.choice(SAYS)} {r.choice([p.name, f.name])}.",
        lambda: f"\"{r.choice(QUESTIONS)}?\" {r.choice(ASKS)} {f.name}, and {p.name} felt {r.choice(FEELINGS)}.",
        lambda: f"{pet_ref[0].upper() + pet_ref[1:]} {r.choice(['ran after', 'chased', 'watched', 'followed', 'met'])} {an(r.choice(ANIMALS))} {r.choice(['across', 'near', 'behind', 'inside'])} the {place}.",
        lambda: f"The {obj} was {adj}, so {p.name} kept it in {p.his} {o2}.",
        lambda: f"{who} saw {r.randint(2, 19)} {plural(r.choice(ANIMALS))} {r.choice(['near', 'on', 'around', 'beyond'])} the {adj} {place}.",
        lambda: f"{f.name} came {r.choice(['from', 'back from', 'all the way from'])} {r.choice(PLACES)} {r.choice(['with', 'and brought', 'carrying'])} {an(adj)} {o2}.",
        lambda: f"{p.he.capitalize()} felt {r.choice(FEELINGS)}, because the {o2} was {col}.",
        lambda: f"They {r.choice(['ate', 'shared', 'cooked', 'bought'])} {r.choice(FOODS)} at the {place} while {r.choice(WEATHER)}.",
        lambda: f"{p.name} and {f.name} {r.choice(['built', 'made', 'carved', 'painted'])} {an(adj)} {o2} out of {col} wood.",
        lambda: f"{r.choice(TIMES)}, {pet_ref} found {an(o2)} under the {col} {r.choice(OBJECTS)}.",
        lambda: f"The {r.choice(JOBS)} of the {place} told {p.him} about {an(adj)} {r.choice(ANIMALS)}.",
        lambda: f"{who} counted {r.randint(3, 60)} {plural(o2)} and wrote the number {r.choice(['down', 'on a card', 'in a book'])}.",
        lambda: f"Far away in {r.choice(PLACES)}, {an(adj)} {r.choice(JOBS)} was {r.choice(['singing', 'working', 'sleeping', 'dancing', 'reading'])}.",
        lambda: f"{who} put the {obj} next to the {col} {o2} and {r.choice(LOOKS)}.",
        lambda: f"{f.name} was {r.choice(FEELINGS)} and {r.choice(MOVES)} to the {place} alone.",
        lambda: f"The road to {r.choice(PLACES)} was {adj}, so {p.name} took the {r.choice(ADJS)} {r.choice(['path', 'way', 'boat', 'train'])}.",
        lambda: f"{who} {r.choice(THINGS_DONE)} while {pet_ref} {r.choice(['slept', 'played', 'waited', 'watched'])}.",
        lambda: f"{f.name} {r.choice(THINGS_DONE)}, and {p.name} {r.choice(THINGS_DONE)}.",
        lambda: f"{r.choice(TIMES)}, {f.name} {r.choice(LOOKS)} and {r.choice(['said nothing', 'went on', 'sat down', 'stood up'])}.",
        lambda: f"There were {r.randint(2, 40)} {plural(r.choice(OBJECTS + ANIMALS))} in the {adj} {place}.",
        lambda: f"{who} {r.choice(['wanted', 'hoped', 'tried', 'needed'])} to {r.choice(['find', 'see', 'sell', 'paint', 'mend'])} the {col} {o2}.",
        lambda: f"Nobody in {p.home} had ever seen {an(adj)} {r.choice(ANIMALS)} like that.",
        lambda: f"{p.name} asked {f.name} {r.choice(['for', 'about'])} the {obj}, and {f.name} {r.choice(LOOKS)}.",
        lambda: f"{r.choice(TIMES)}, the {r.choice(['bells', 'birds', 'children', 'boats', 'trees'])} of the {place} {r.choice(['were quiet', 'were loud', 'moved slowly', 'woke up'])}.",
    ]
    return r.choice(frames)()


def story_body(r, p, n_sentences, about=None):
    friend = other_person(r, {p.name})
    friends = [friend, other_person(r, {p.name, friend.name})]
    pet = about or r.choice(ANIMALS)
    pet_name = r.choice([n for n in NAMES_F + NAMES_M if n not in (p.name, friend.name)])
    obj = r.choice(OBJECTS)
    opening = r.choice([
        f"Once upon a time, in the {r.choice(ADJS)} town of {p.home}, there lived a {p.job} named {p.name}.",
        f"There was once a {r.choice(ADJS)} {p.job} called {p.name} who lived in {p.home}.",
        f"Long ago, {p.name} the {p.job} lived near a {r.choice(PLACE_NOUNS)} in {p.home}.",
    ])
    second = f"{p.name} had {an(r.choice(COLORS))} {pet} named {pet_name} and {an(r.choice(ADJS))} {obj}."
    sents = [opening, second]
    for _ in range(n_sentences):
        sents.append(story_sentence(r, p, friends, pet, pet_name, obj))
    ending = r.choice([
        f"In the end, {p.name} and {pet_name} went home to {p.home}, {r.choice(FEELINGS)} and happy.",
        f"And so {p.name} the {p.job} never forgot the {r.choice(ADJS)} {obj}.",
        f"That night {p.name} slept well, and {pet_name} slept by the door.",
    ])
    sents.append(ending)
    # paragraphs of 3-5 sentences
    out, para = [], []
    for s in sents:
        para.append(s)
        if len(para) >= r.randint(3, 5):
            out.append(" ".join(para))
            para = []
    if para:
        out.append(" ".join(para))
    return "\n\n".join(out)


def doc_story(r):
    p = Person(r)
    title = f"The {r.choice(ADJS).capitalize()} {r.choice(OBJECTS).capitalize()} of {p.name}"
    return f"{title}\n\n" + story_body(r, p, r.randint(6, 40)) + "\n\nThe end."


# --------------------------------------------------------------------------------------------
# Facts, then an unrelated story (the distance), then questions about the facts.
FACT_KINDS = ["home", "pet", "food", "code", "count", "color"]


def make_facts(r, n):
    """n facts about distinct people: (statement, question, answer, short answer)."""
    used, facts = set(), []
    kinds = [r.choice(FACT_KINDS) for _ in range(n)]
    for kind in kinds:
        name = r.choice([x for x in NAMES_F + NAMES_M if x not in used])
        used.add(name)
        if kind == "home":
            c = r.choice(PLACES)
            facts.append((f"{name} lives in {c}.", f"Where does {name} live?", f"{name} lives in {c}.", c))
        elif kind == "pet":
            a = r.choice(ANIMALS)
            facts.append((f"{name} has {an(a)}.", f"What animal does {name} have?", f"{name} has {an(a)}.", a))
        elif kind == "food":
            f = r.choice(FOODS)
            facts.append((f"{name} likes {f}.", f"What does {name} like to eat?", f"{name} likes {f}.", f))
        elif kind == "code":
            c = "".join(str(r.randint(0, 9)) for _ in range(r.choice([3, 4])))
            facts.append((f"The code of {name} is {c}.", f"What is the code of {name}?", f"The code of {name} is {c}.", c))
        elif kind == "count":
            k = r.randint(2, 30)
            o = r.choice(OBJECTS)
            facts.append((f"{name} owns {k} {plural(o)}.", f"How many {plural(o)} does {name} own?",
                          f"{name} owns {k} {plural(o)}.", str(k)))
        else:
            c = r.choice(COLORS)
            o = r.choice(OBJECTS)
            facts.append((f"The {o} of {name} is {c}.", f"What color is the {o} of {name}?",
                          f"The {o} of {name} is {c}.", c))
    return facts


def filler(r, lo, hi):
    p = Person(r)
    return story_body(r, p, r.randint(lo, hi))


def doc_memory(r):
    facts = make_facts(r, r.randint(2, 7))
    head = r.choice(["Here are some facts to remember.", "Read these notes carefully.", "Facts of the day."])
    text = head + "\n" + "\n".join(f[0] for f in facts)
    text += "\n\n" + r.choice(["Now a story.", "Meanwhile, a story.", "Here is a story."]) + "\n\n"
    text += filler(r, 1, 24)
    text += "\n\n" + r.choice(["Now the questions.", "Questions about the facts.", "Let us check the notes."]) + "\n"
    order = facts[:]
    r.shuffle(order)
    for f in order[: r.randint(1, len(order))]:
        text += f"Q: {f[1]}\nA: {f[2]}\n"
    return text.rstrip("\n")


# --------------------------------------------------------------------------------------------
# Counting and lists: hundreds of tokens where each step depends on the last.
def counting(r, a, b, step=1):
    return ", ".join(str(x) for x in range(a, b + (1 if step > 0 else -1), step))


def doc_count(r):
    kind = r.random()
    if kind < 0.5:
        a = r.randint(0, 900)
        b = a + r.randint(5, 120)
        return f"Let us count from {a} to {b}.\n{counting(r, a, b)}.\nThat is {b - a + 1} numbers."
    if kind < 0.65:
        b = r.randint(0, 500)
        a = b + r.randint(5, 60)
        return f"Count down from {a} to {b}.\n{counting(r, a, b, -1)}.\nDone."
    if kind < 0.8:
        k = r.randint(2, 9)
        lines = [f"{k} times {i} is {k * i}." for i in range(1, r.randint(5, 12) + 1)]
        return f"The table of {k}.\n" + "\n".join(lines)
    # a numbered list, then its length
    p = Person(r)
    n = r.randint(3, 30)
    items = []
    for i in range(1, n + 1):
        items.append(f"{i}. {an(r.choice(ADJS))} {r.choice(COLORS)} {r.choice(OBJECTS + ANIMALS)}")
    return (f"{p.name} the {p.job} made a list of things in {p.his} {r.choice(PLACE_NOUNS)}.\n" + "\n".join(items)
            + f"\nThe list has {n} things.")


# --------------------------------------------------------------------------------------------
# Chat turns (spec model.md §7.2): thinking on renders "<think>\nR\n</think>\n\nA", off renders
# an empty think block, exactly as the template's generation prompt does.
def turn(user, reasoning, answer, thinking, system=None):
    s = ""
    if system:
        s += f"<|im_start|>system\n{system}<|im_end|>\n"
    s += f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    s += f"<think>\n{reasoning}\n</think>\n\n" if thinking else "<think>\n\n</think>\n\n"
    return s + answer + "<|im_end|>"


def chat_arith(r):
    op = r.random()
    if op < 0.6:
        a, b = r.randint(0, 12), r.randint(0, 12)
        q = r.choice([f"What is {a}+{b}?", f"What is {a} plus {b}?", f"How much is {a}+{b}?"])
        reason = f"The user is asking for {a}+{b}. {a} plus {b} makes {a + b}. So the answer is {a + b}."
        ans = r.choice([f"{a}+{b} = {a + b}.", f"{a} plus {b} is {a + b}.", f"The answer is {a + b}."])
        val = a + b
    elif op < 0.8:
        a = r.randint(0, 20)
        b = r.randint(0, a)
        q = f"What is {a}-{b}?"
        reason = f"The user is asking for {a}-{b}. Taking {b} from {a} leaves {a - b}. So the answer is {a - b}."
        ans = r.choice([f"{a}-{b} = {a - b}.", f"The answer is {a - b}."])
        val = a - b
    else:
        a, b = r.randint(1, 9), r.randint(1, 9)
        q = f"What is {a} times {b}?"
        reason = f"The user is asking for {a} times {b}. {a} times {b} is {a * b}. So the answer is {a * b}."
        ans = f"{a} times {b} is {a * b}."
        val = a * b
    return q, reason, ans, str(val)


def chat_recall(r, lo=1, hi=22):
    facts = make_facts(r, r.randint(2, 6))
    f = r.choice(facts)
    ctx = " ".join(x[0] for x in facts)
    story = filler(r, lo, hi).replace("\n\n", " ")
    q = f"Remember this: {ctx} Now listen to a story. {story} {f[1]}"
    reason = f"The user asks: {f[1]} Earlier the user said: {f[0]} So the answer is {f[3]}."
    return q, reason, f[2], f[3]


def chat_story(r):
    a = r.choice(ANIMALS)
    length = r.choice(["short", "long"])
    q = r.choice([f"Tell me a {length} story about {an(a)}.", f"Write a {length} story about {an(a)}.",
                  f"Please tell me a {length} story with {an(a)} in it."])
    reason = f"The user wants a {length} story about {an(a)}. I will write one with a clear ending."
    p = Person(r)
    n = r.randint(4, 10) if length == "short" else r.randint(25, 45)
    return q, reason, story_body(r, p, n, about=a) + "\n\nThe end.", None


def chat_count(r):
    a = r.randint(0, 300)
    b = a + r.randint(3, 40)
    q = r.choice([f"Count from {a} to {b}.", f"Please count from {a} to {b}."])
    reason = f"The user wants the numbers from {a} to {b}. That is {b - a + 1} numbers."
    return q, reason, counting(r, a, b) + ".", counting(r, a, b)


def chat_next(r):
    n = r.randint(0, 998)
    q = r.choice([f"What number comes after {n}?", f"Which number follows {n}?"])
    reason = f"The user asks for the number after {n}. {n} plus 1 is {n + 1}."
    return q, reason, f"The number after {n} is {n + 1}.", str(n + 1)


def chat_list(r):
    k = r.randint(2, 8)
    kind = r.choice(["colors", "animals", "foods", "cities"])
    pool = {"colors": COLORS, "animals": ANIMALS, "foods": FOODS, "cities": PLACES}[kind]
    items = r.sample(pool, k)
    q = f"Name {NUMBER_WORDS[k]} {kind}."
    reason = f"The user wants {NUMBER_WORDS[k]} {kind}. I will list {k} of them."
    return q, reason, "\n".join(f"{i + 1}. {x.capitalize()}" for i, x in enumerate(items)), None


SYSTEMS = ["You are a helpful assistant.", "You are a friendly assistant who answers briefly.",
           "Answer the questions of the user."]
CHAT_KINDS = [(chat_arith, 0.24), (chat_recall, 0.26), (chat_story, 0.2), (chat_count, 0.1),
              (chat_next, 0.1), (chat_list, 0.1)]


def pick(r, table):
    x = r.random() * sum(w for _, w in table)
    for f, w in table:
        x -= w
        if x <= 0:
            return f
    return table[-1][0]


def doc_chat(r, chat_kinds=None):
    system = r.choice(SYSTEMS) if r.random() < 0.25 else None
    turns = []
    for i in range(r.choice([1, 1, 1, 2, 3])):
        q, reason, ans, _ = pick(r, chat_kinds or CHAT_KINDS)(r)
        thinking = r.random() < 0.7
        turns.append(turn(q, reason, ans, thinking, system if i == 0 else None))
    return "\n".join(turns)


DOC_KINDS = [(doc_story, 0.28), (doc_memory, 0.22), (doc_count, 0.12), (doc_chat, 0.38)]

# The second training stage (tools/train_tiny_hybrid.py STAGES): the same grammar, weighted towards
# what the first stage learnt last and least: facts asked about after a story (the recurrent state
# and attention must carry them over hundreds of tokens) and arithmetic facts.
STAGE2_CHAT_KINDS = [(chat_arith, 0.3), (chat_recall, 0.45), (chat_story, 0.1), (chat_count, 0.05),
                     (chat_next, 0.05), (chat_list, 0.05)]
STAGE2_DOC_KINDS = [(doc_story, 0.12), (doc_memory, 0.33), (doc_count, 0.05),
                    (lambda r: doc_chat(r, STAGE2_CHAT_KINDS), 0.5)]

MIXES = {"stage1": DOC_KINDS, "stage2": STAGE2_DOC_KINDS}


def documents(seed, mix="stage1"):
    """An endless, deterministic stream of documents of one mix (MIXES)."""
    if mix not in MIXES:
        raise ValueError(f"unknown document mix {mix!r}; expected one of {sorted(MIXES)}")
    r = random.Random(seed)
    kinds = MIXES[mix]
    while True:
        yield pick(r, kinds)(r)


# --------------------------------------------------------------------------------------------
# The held-out questions: separate seed space (training uses seeds < 1000), greedy answers checked
# by substring. Each entry: id, kind, prompt (one user turn), thinking, expect (the answer after
# </think> must contain every string of `expect`).
HELDOUT_SEED = 424242


def heldout(n_per_kind=None):
    r = random.Random(HELDOUT_SEED)
    n_per_kind = n_per_kind or {"recall": 60, "recall-far": 40, "arith": 40, "next": 30, "count": 30}
    out = []
    for kind, n in n_per_kind.items():
        for i in range(n):
            if kind == "recall":
                q, _, _, a = chat_recall(r, 1, 6)
            elif kind == "recall-far":
                q, _, _, a = chat_recall(r, 14, 20)
            elif kind == "arith":
                q, _, _, a = chat_arith(r)
            elif kind == "next":
                q, _, _, a = chat_next(r)
            else:
                q, _, _, a = chat_count(r)
            out.append({"id": f"{kind}-{i:02d}", "kind": kind, "prompt": q, "thinking": i % 4 != 3, "expect": [a]})
    return out


def heldout_file():
    qs = heldout()
    return {"format": "degenbisect-heldout-1",
            "description": "Held-out questions of the trained tiny model (tools/tiny_corpus.py, "
                           f"seed {HELDOUT_SEED}): the greedy answer must contain every `expect` string.",
            "questions": qs}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=0, help="print this many documents of the training stream")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--heldout", help="write the held-out question set (JSON) to this file")
    args = ap.parse_args()
    if args.heldout:
        h = heldout_file()
        with open(args.heldout, "w") as f:
            json.dump(h, f, indent=1)
            f.write("\n")
        print(f"wrote {len(h['questions'])} questions to {args.heldout}", file=sys.stderr)
    it = documents(args.seed)
    for _ in range(args.docs):
        print(next(it))
        print("<|endoftext|>")


if __name__ == "__main__":
    main()
