"""toy-sum: summarization of invented news stories (metric: ROUGE-L). The name lists are built once
from SUM_LEXICON_SEED; `SumGenerator` draws (document, summary) pairs."""

import random
import string

SUM_LEXICON_SEED = 4321

# toy-sum: invented news stories
#
# A story reports one event of a given type (layoffs, an election, a storm, a
# court case, ...). The document is a lead sentence with the salient facts,
# 1-3 supporting "extra" sentences, and distractors (background, quotes,
# unrelated news) carrying other names and numbers of the same kind; 30% of
# stories open with a scene-setting sentence before the lead. The summary
# restates the lead with a paired rephrasing template and, when the sentence
# right after the lead is an extra, adds that extra's short restatement.

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
ORG_SUFFIXES = (
    "Group",
    "Industries",
    "Motors",
    "Energy",
    "Foods",
    "Systems",
    "Bank",
    "Airways",
    "Logistics",
    "Pharma",
    "Textiles",
    "Telecom",
)

# Each event: "n" the range of its main number; "slots" extra choices (a second,
# different value is drawn as slot+"2"); "lead" and "summary" paired templates;
# "extras" (document sentence, summary sentence) pairs; "other" distractors.
SUM_EVENTS = (
    {
        "name": "layoffs",
        "n": (40, 3000),
        "slots": {
            "site": (
                "factory",
                "plant",
                "warehouse",
                "call centre",
                "head office",
                "distribution centre",
            )
        },
        "lead": (
            "{org} said on {day} that it would cut {n} jobs at its {site} in {city}, blaming rising costs.",
            "About {n} workers at the {city} {site} of {org} will lose their jobs, the company announced on {day}.",
            "{org} plans to shed {n} jobs in {city} as demand for its products falls, it said on {date}.",
        ),
        "summary": (
            "{org} is to cut {n} jobs at its {site} in {city} because of rising costs.",
            "{org} has announced that about {n} jobs will go at its {site} in {city}.",
            "Falling demand has led {org} to announce plans to cut {n} jobs in {city}.",
        ),
        "extras": (
            (
                "The cuts are part of a plan to save {money} million euros by {future_year}.",
                "The company wants to save {money} million euros by {future_year}.",
            ),
            (
                '{person}, the chief executive of {org}, said the decision had been "very difficult".',
                "Chief executive {person} called it a very difficult decision.",
            ),
            (
                "Unions said they would meet on {day2} to discuss possible strike action.",
                "Unions will meet on {day2} to discuss a strike.",
            ),
        ),
        "other": (
            "The {site} opened in {year} and currently employs {n2} people.",
            "Last year {org} cut {n3} jobs at its sites in {city2}.",
            '"This is a terrible day for {city}," said {person2}, a local councillor.',
            "{org2}, a rival firm, announced {n3} new jobs in {city3} last month.",
        ),
    },
    {
        "name": "takeover",
        "n": (50, 9000),
        "slots": {},
        "lead": (
            "{org} has agreed to buy its smaller rival {org2} for {n} million dollars, the two companies said on {day}.",
            "{org2} will be taken over by {org} in a deal worth {n} million dollars, it was announced on {date}.",
        ),
        "summary": (
            "{org} is buying its rival {org2} for {n} million dollars.",
            "{org} has agreed a deal worth {n} million dollars to take over {org2}.",
        ),
        "extras": (
            (
                "The deal is expected to be completed by the end of {month}.",
                "The deal should be completed by the end of {month}.",
            ),
            (
                "{org} said no jobs would be lost at the headquarters of {org2} in {city}.",
                "No jobs will be lost in {city}, {org} said.",
            ),
            (
                '{person}, the head of {org}, said the merger would create "a stronger company".',
                "{person} said the merger would create a stronger company.",
            ),
        ),
        "other": (
            "{org2} was founded in {city} in {year} and has about {jobs} employees.",
            "Earlier this year {org3} offered {n3} million dollars for {org2} but was turned down.",
            "Shares in {org2} rose {pct} percent after the announcement.",
            '"We are excited about the future," said {person2}, a spokesperson for {org2}.',
        ),
    },
    {
        "name": "election",
        "n": (35, 72),
        "slots": {
            "office": ("mayor", "governor", "council leader"),
            "party": ("Green", "Liberal", "Farmers", "Labour", "Unity", "Reform", "Progress"),
        },
        "lead": (
            "{person} has been elected {office} of {city} after winning {n} percent of the vote in the election on {day}.",
            "Voters in {city} have chosen {person} of the {party} Party as their new {office}, with {n} percent of the vote.",
            "{person} won the race for {office} of {city} on {day}, taking {n} percent of the vote.",
        ),
        "summary": (
            "{person} is the new {office} of {city} after winning {n} percent of the vote.",
            "{person} of the {party} Party has been elected {office} of {city} with {n} percent of the vote.",
            "{person} won the election for {office} of {city} with {n} percent.",
        ),
        "extras": (
            (
                "Turnout was {pct2} percent, the lowest since {year}.",
                "Turnout was only {pct2} percent.",
            ),
            (
                "{person2}, the outgoing {office}, congratulated {last} on the result.",
                "The outgoing {office}, {person2}, congratulated {last}.",
            ),
            (
                "{last} has promised to build {k} new schools in the city.",
                "{last} has promised {k} new schools.",
            ),
        ),
        "other": (
            "{person3} of the {party2} Party came second with {pct3} percent.",
            "{person} previously worked as a teacher in {city2}.",
            '"Tonight the people of {city} have spoken," {last} told supporters.',
            "The last election in {city}, in {year}, was decided by fewer than {n3} votes.",
        ),
    },
    {
        "name": "disaster",
        "n": (50, 20000),
        "slots": {"kind": ("storm", "flood", "wildfire")},
        "lead": (
            "More than {n} people were evacuated from their homes in {city} on {day} as a {kind} swept through the region.",
            "A {kind} in {city} has forced {n} residents to leave their homes, officials said on {date}.",
        ),
        "summary": (
            "A {kind} has forced more than {n} people in {city} to leave their homes.",
            "{n} residents of {city} have been evacuated because of a {kind}.",
        ),
        "extras": (
            (
                "{k} people were taken to hospital with minor injuries.",
                "{k} people were treated in hospital.",
            ),
            (
                "Emergency shelters have been set up in {k2} schools across the city.",
                "Shelters have opened in {k2} schools.",
            ),
            (
                "{person}, the mayor of {city}, urged residents to stay indoors.",
                "Mayor {person} told residents to stay indoors.",
            ),
        ),
        "other": (
            "The last {kind} of this size hit the area in {year}, when {n2} people had to leave.",
            "Forecasters expect conditions to improve by {day2}.",
            '"We have never seen anything like this," said {person2}, who has lived in {city} for {k3} years.',
            "Roads between {city} and {city2} remain closed.",
        ),
    },
    {
        "name": "study",
        "n": (200, 50000),
        "slots": {
            "finding": (
                "people who walk every day sleep better",
                "drinking coffee may protect the heart",
                "children who read at home do better at school",
                "older adults who learn a language stay sharp for longer",
                "working from home can reduce stress",
                "eating late at night may harm sleep",
            )
        },
        "lead": (
            "Researchers at the University of {city} say {finding}, after a study of {n} people.",
            "A study of {n} volunteers led by {person} at the University of {city} has found that {finding}.",
        ),
        "summary": (
            "A study of {n} people by the University of {city} suggests {finding}.",
            "{person} of the University of {city} found that {finding}, in a study of {n} volunteers.",
        ),
        "extras": (
            (
                "The study, which lasted {k} years, was published on {day}.",
                "The study lasted {k} years.",
            ),
            (
                "The team now plans a larger trial in {city2}.",
                "A larger trial is planned in {city2}.",
            ),
            (
                "The research was funded by {org} with a grant of {money} thousand euros.",
                "It was funded by {org}.",
            ),
        ),
        "other": (
            "An earlier study of {n2} people found no such link.",
            '"More work is needed," said {person2}, who was not involved in the research.',
            "The university was founded in {year} and has about {n3} students.",
        ),
    },
    {
        "name": "match",
        "n": (2000, 90000),
        "slots": {
            "club": ("United", "Rovers", "Athletic", "City", "Wanderers", "Rangers"),
            "ordinal": ("second", "third", "fourth", "fifth", "sixth"),
        },
        "lead": (
            "{city} {club} beat {city2} {club2} {s1}-{s2} on {day} in front of {n} fans, with {person} scoring twice.",
            "{person} scored twice as {city} {club} defeated {city2} {club2} {s1}-{s2} in front of {n} fans on {day}.",
        ),
        "summary": (
            "{city} {club} won {s1}-{s2} against {city2} {club2}, with two goals from {person}.",
            "Two goals by {person} helped {city} {club} beat {city2} {club2} {s1}-{s2}.",
        ),
        "extras": (
            (
                "The win moves {city} {club} up to {ordinal} place in the league.",
                "The team is now {ordinal} in the league.",
            ),
            (
                '{person2}, the coach of {city2} {club2}, said his team had "no excuses".',
                "{city2} coach {person2} said there were no excuses.",
            ),
        ),
        "other": (
            "The two sides last met in {year}, when the game ended in a draw.",
            "{city2} {club2} have now lost {k} of their last {k4} games.",
            "The stadium, which holds {n2} people, was built in {year}.",
            "Tickets for the match sold out within {k3} hours.",
        ),
    },
    {
        "name": "court",
        "n": (2, 20),
        "slots": {"crime": ("fraud", "theft", "arson", "bribery", "tax evasion")},
        "lead": (
            "A court in {city} on {day} sentenced {person} to {n} years in prison for {crime}.",
            "{person}, a former manager at {org}, was jailed for {n} years on {day} after being found guilty of {crime}.",
        ),
        "summary": (
            "{person} has been jailed for {n} years for {crime} by a court in {city}.",
            "Former {org} manager {person} was sentenced to {n} years in prison for {crime}.",
        ),
        "extras": (
            (
                "The court heard that {last} had taken {money} thousand euros over {k} years.",
                "{last} took {money} thousand euros over {k} years.",
            ),
            ("The lawyer for {last} said his client would appeal.", "{last} will appeal."),
            (
                'Judge {person2} said the crime had caused "great harm".',
                "Judge {person2} said it caused great harm.",
            ),
        ),
        "other": (
            "Prosecutors had asked for a sentence of {n2} years.",
            "A second defendant, {person3}, was cleared of all charges.",
            "The trial lasted {k4} weeks.",
            "In {year} a similar case in {city2} ended with a sentence of {n3} years.",
        ),
    },
    {
        "name": "festival",
        "n": (1000, 250000),
        "slots": {"fest": ("music", "film", "food", "book", "jazz", "lantern", "theatre")},
        "lead": (
            "The {city} {fest} festival attracted a record {n} visitors over the weekend, organisers said on {day}.",
            "A record {n} people attended this year's {fest} festival in {city}, according to organisers.",
        ),
        "summary": (
            "A record {n} people visited the {fest} festival in {city} over the weekend.",
            "The {fest} festival in {city} drew a record crowd of {n} visitors.",
        ),
        "extras": (
            (
                "Organisers said the event brought {money} million euros into the local economy.",
                "It was worth {money} million euros to the local economy.",
            ),
            ("The festival will return in {month} next year.", "It will return next {month}."),
            (
                '{person}, the festival director, said she was "overwhelmed" by the response.',
                "Festival director {person} said she was overwhelmed.",
            ),
        ),
        "other": (
            "Last year the festival drew {n2} visitors.",
            "The first festival was held in {year} with just {k} performers.",
            "Local hotels said almost all rooms were booked.",
            "Some residents of {city} complained about noise and traffic.",
        ),
    },
    {
        "name": "project",
        "n": (5, 900),
        "slots": {
            "project": (
                "bridge",
                "tram line",
                "hospital",
                "railway station",
                "sports centre",
                "school",
            )
        },
        "lead": (
            "{city} council on {day} approved a {n} million euro plan to build a new {project}.",
            "A new {project} costing {n} million euros will be built in {city}, the council decided on {date}.",
        ),
        "summary": (
            "{city} council has approved a new {project} that will cost {n} million euros.",
            "{city} will build a new {project} for {n} million euros, the council has decided.",
        ),
        "extras": (
            (
                "Work is due to start in {month} and take {k} years.",
                "Work will start in {month} and take {k} years.",
            ),
            (
                '{person}, the council leader, said the {project} would "change the city".',
                "Council leader {person} said it would change the city.",
            ),
            ("The project is expected to create {jobs} jobs.", "It should create {jobs} jobs."),
        ),
        "other": (
            "A similar {project} in {city2} cost {n3} million euros.",
            "Opponents say the money should be spent on housing instead.",
            "The old {project2} was closed in {year}.",
            "{person2}, who leads the opposition group, voted against the plan.",
        ),
    },
    {
        "name": "strike",
        "n": (100, 20000),
        "slots": {
            "staff": (
                "nurses",
                "bus drivers",
                "teachers",
                "dock workers",
                "train drivers",
                "airport staff",
            )
        },
        "lead": (
            "About {n} {staff} in {city} went on strike on {day} in a dispute over pay.",
            "A strike by {n} {staff} over pay caused major disruption in {city} on {day}.",
        ),
        "summary": (
            "{n} {staff} in {city} have gone on strike in a dispute over their pay.",
            "A strike over pay by {n} {staff} has caused major disruption in {city}.",
        ),
        "extras": (
            (
                "The union is demanding a pay rise of {pct} percent.",
                "The union wants a rise of {pct} percent.",
            ),
            (
                "{org}, which employs the workers, has offered {pct2} percent.",
                "{org} has offered {pct2} percent.",
            ),
            (
                "Union leader {person} said the strike would last {k} days.",
                "The strike will last {k} days, said union leader {person}.",
            ),
        ),
        "other": (
            "The last strike in {city}, in {year}, lasted {k3} weeks.",
            '"We are open to talks," said {person2}, a spokesperson for {org}.',
            "{staff2} in {city2} are due to vote on similar action next month.",
            "Around {n2} {staff2} work in the region.",
        ),
    },
    {
        "name": "appointment",
        "n": (38, 67),
        "slots": {},
        "lead": (
            "{org} has named {person} as its new chief executive, the company said on {day}.",
            "{person}, {n}, will take over as chief executive of {org} in {month}, the company announced.",
        ),
        "summary": (
            "{person} will be the new chief executive of {org}, the company said.",
            "{org} has appointed {person}, {n}, as chief executive from {month}.",
        ),
        "extras": (
            (
                "{last} joins from {org2}, where she ran the business in {city}.",
                "{last} previously ran {org2} in {city}.",
            ),
            (
                "She replaces {person2}, who is retiring after {k} years in the job.",
                "She replaces {person2}, who is retiring.",
            ),
        ),
        "other": (
            "{org} employs {jobs} people and is based in {city2}.",
            "Shares in {org} rose {pct} percent on the news.",
            "{person3} had also been considered for the job.",
        ),
    },
    {
        "name": "crash",
        "n": (10, 80),
        "slots": {"vehicle": ("train", "bus", "ferry", "tram", "coach")},
        "lead": (
            "{n} people were injured when a {vehicle} crashed near {city} on {day}.",
            "A {vehicle} crash near {city} on {day} left {n} people injured, police said.",
        ),
        "summary": (
            "{n} people were hurt when a {vehicle} crashed near {city} on {day}.",
            "Police say {n} people were injured when a {vehicle} crashed near {city}.",
        ),
        "extras": (
            (
                "The {vehicle} was carrying {passengers} passengers from {city2}.",
                "The {vehicle} was carrying {passengers} passengers.",
            ),
            ("{k} of the injured are in a serious condition.", "{k} of them are seriously hurt."),
            (
                "Investigators from {org} are trying to find the cause.",
                "{org} is investigating the cause.",
            ),
        ),
        "other": (
            "A similar crash in {year} left {n3} people injured.",
            '"It was terrifying," said {person2}, a passenger.',
            "The line between {city} and {city2} will stay closed until {day2}.",
        ),
    },
)

# distractors that fit any story, and scene-setting openings
SUM_FILLERS = (
    "{city} has a population of about {pop}.",
    "Separately, {org3} said it had hired {n4} new staff.",
    "{person4}, who was not involved, declined to comment.",
    "In {year2}, a similar case in {city3} drew national attention.",
    "Local elections are due to take place in {month2}.",
    "Shares in {org3} rose {pct4} percent on {day2}.",
    "The news was first reported by the {city3} Herald.",
    "{person5}, a historian at the University of {city3}, said the region had seen such events before.",
    "The weather in {city} is expected to stay {weather} this week.",
    "A new museum opened in {city3} on {day2}, with {n5} visitors on its first day.",
    "Traffic on the main road to {city2} was slow for most of the day.",
)
SUM_OPENINGS = (
    "It has been a busy {season} for {city}.",
    "Residents of {city} woke up to unexpected news on {day}.",
    "For years, {city} has been known for its {feature}.",
    "{city} is usually a quiet place in {season}.",
)
_SUM_GENERIC_SLOTS = {
    "season": ("spring", "summer", "autumn", "winter"),
    "feature": ("old harbour", "markets", "river", "football club", "university", "bridges"),
    "weather": ("dry", "wet", "cold", "warm", "windy"),
}


def _sum_name(rng, n_syll, suffixes=("",)):
    onsets = (
        "b",
        "br",
        "c",
        "d",
        "f",
        "g",
        "h",
        "j",
        "k",
        "l",
        "m",
        "n",
        "p",
        "r",
        "s",
        "t",
        "v",
        "w",
        "z",
        "ch",
        "sh",
        "th",
        "st",
        "gr",
    )
    vowels = ("a", "e", "i", "o", "u", "ai", "ea", "ou", "y", "ie")
    codas = ("", "", "n", "r", "l", "s", "th", "rd", "nd", "k", "m", "x", "ck")
    w = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(n_syll)) + rng.choice(codas)
    return (w + rng.choice(suffixes)).capitalize()


_SUM_LEXICON = None


def sum_lexicon():
    """The toy-sum name lists (built once from SUM_LEXICON_SEED): first, last, city, org."""
    global _SUM_LEXICON
    if _SUM_LEXICON is None:
        rng = random.Random(SUM_LEXICON_SEED)
        used = set()

        def names(count, make):
            out = []
            while len(out) < count:
                w = make()
                if w not in used:
                    used.add(w)
                    out.append(w)
            return out

        _SUM_LEXICON = {
            "first": names(200, lambda: _sum_name(rng, rng.choice((1, 2, 2)))),
            "last": names(400, lambda: _sum_name(rng, rng.choice((2, 2, 3)))),
            "city": names(
                150,
                lambda: _sum_name(
                    rng,
                    rng.choice((1, 2)),
                    ("", "", "ton", "burg", "ford", "haven", "mouth", "vale"),
                ),
            ),
        }
        _SUM_LEXICON["org"] = names(150, lambda: _sum_name(rng, 2) + " " + rng.choice(ORG_SUFFIXES))
    return _SUM_LEXICON


def _draw(rng, seq, k):
    """``k`` distinct items of ``seq``, drawn with rng.random() (faster than rng.sample)."""
    out = []
    while len(out) < k:
        x = seq[int(rng.random() * len(seq))]
        if x not in out:
            out.append(x)
    return out


def _slots(template):
    """The {slot} names used by a template string."""
    return {field for _, field, _, _ in string.Formatter().parse(template) if field}


class SumGenerator:
    """Draws toy-sum (document, summary) pairs."""

    def __init__(self, lex, rng):
        self.lex, self.rng = lex, rng

    def facts(self, event):
        """Slot values for one story: names, places, dates and numbers."""
        rng, lex = self.rng, self.lex

        def draw(seq, k=1):
            return _draw(rng, seq, k)

        def num(lo, hi):
            return lo + int(rng.random() * (hi - lo + 1))

        f = {}
        people = zip(draw(lex["first"], 5), draw(lex["last"], 5))
        for key, (first, last) in zip(("", "2", "3", "4", "5"), people):
            f["person" + key], f["last" + key] = f"{first} {last}", last
        for kind in ("org", "city"):
            for key, value in zip(("", "2", "3"), draw(lex[kind], 3)):
                f[kind + key] = value
        f["day"], f["day2"] = draw(WEEKDAYS, 2)
        f["month"], f["month2"] = draw(MONTHS, 2)
        f["date"] = f"{num(1, 28)} {f['month']}"
        f["year"], f["year2"] = draw(range(1950, 2019), 2)
        f["future_year"] = num(2026, 2035)
        # the main number n and distractor numbers n2, n3 of the same kind
        f["n"], f["n2"], f["n3"] = (
            f"{x:,}" for x in draw(range(event["n"][0], event["n"][1] + 1), 3)
        )
        f["n4"], f["n5"] = draw(range(20, 901), 2)
        f["pop"] = f"{num(5, 900) * 1000:,}"
        f["jobs"], f["passengers"] = f"{num(50, 5000):,}", str(num(20, 400))
        k, f["k2"], f["k3"] = draw(range(2, 10), 3)
        f["k"], f["k4"] = k, k + num(1, 6)
        f["money"] = num(2, 900)
        f["pct"], f["pct2"], f["pct3"], f["pct4"] = draw(range(2, 35), 4)
        f["s1"] = num(2, 6)
        f["s2"] = num(0, f["s1"] - 1)
        for slots in (_SUM_GENERIC_SLOTS, event["slots"]):
            for key, options in slots.items():
                f[key], f[key + "2"] = draw(options, 2)
        return f

    def example(self):
        """One (document, summary) pair: 3-5 document sentences, a 1-2 sentence summary."""
        rng = self.rng
        event = rng.choice(SUM_EVENTS)
        f = self.facts(event)
        i = rng.randrange(len(event["lead"]))
        lead, summary = event["lead"][i].format(**f), [event["summary"][i].format(**f)]
        n_sent = rng.randint(3, 5)
        extras = rng.sample(event["extras"], rng.randint(1, len(event["extras"])))
        other = rng.sample(event["other"], rng.randint(1, min(3, len(event["other"]))))
        body = [x.format(**f) for x, _ in extras] + [x.format(**f) for x in other]
        opening = [rng.choice(SUM_OPENINGS).format(**f)] if rng.random() < 0.3 else []
        n_fill = max(0, n_sent - 1 - len(opening) - len(body))
        body += [x.format(**f) for x in rng.sample(SUM_FILLERS, n_fill)]
        rng.shuffle(body)
        first_extra = extras[0][0].format(**f)
        if rng.random() < 0.5:  # often put an extra right after the lead
            body.remove(first_extra)
            body.insert(0, first_extra)
        body = body[: max(1, n_sent - 1 - len(opening))]
        for doc_sentence, summary_sentence in extras:
            if body[0] == doc_sentence.format(**f):  # the follow-up fact joins the summary
                summary.append(summary_sentence.format(**f))
        return " ".join(opening + [lead] + body), " ".join(summary)
