"""The built-in English TTS workload, and loading a replacement from a text file.

Prompts run from one short clause to a long paragraph, so that a run mixes the short
requests that show time to first audio with the long ones that test continuity. Numbers
are spelled out, so the same texts serve as ASR references without normalization rules.
"""

from __future__ import annotations

import random
from pathlib import Path

__all__ = ["BUILTIN_PROMPTS", "load_prompts", "pick"]

BUILTIN_PROMPTS: tuple[str, ...] = (
    # one clause
    "Hello there.",
    "Turn left at the next corner.",
    "The kettle is boiling.",
    "Your order has shipped.",
    "Please hold the line.",
    "It looks like rain this afternoon.",
    "Meeting moved to Thursday morning.",
    "Welcome back, how can I help you today?",
    # one sentence
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch.",
    ("Your package will arrive between two and four in the afternoon, so please keep your "
    "phone nearby."),
    ("Before you leave the building, make sure that every window on the second floor is "
    "closed and locked."),
    ("The museum opens at nine, but the guided tours of the east wing do not start until "
    "half past ten."),
    ("If the red light on the router keeps blinking, unplug it for thirty seconds and plug "
    "it back in."),
    ("She painted the small wooden boat bright yellow so that she could spot it from the "
    "hill above the harbor."),
    ("Add the flour slowly, stirring all the time, until the batter is smooth and thick "
    "enough to coat a spoon."),
    "Our support team is available every day of the week, including public holidays.",
    # two or three sentences
    ("Thank you for calling. All of our agents are busy at the moment. Please stay on the "
    "line and your call will be answered in the order it was received."),
    ("The train to the airport leaves from platform six. It stops at every station after "
    "the river crossing. Allow about forty minutes for the whole trip."),
    ("I read the report last night. Most of it was clear, but the section on costs needs "
    "more detail before we can share it with the board."),
    ("Take one tablet twice a day with food. Do not drive if you feel drowsy. Call your "
    "doctor if the symptoms last longer than a week."),
    ("The storm knocked out power across the valley. Crews are working through the night, "
    "and most homes should have electricity again by tomorrow noon."),
    ("Lift the lid and check the water level. If it sits below the line, fill it up with "
    "clean water and close the lid firmly."),
    ("Our flight was delayed by three hours. We spent the time reading in the lounge and "
    "watching the planes land in the evening light."),
    ("You have three new messages. The first one is from your sister, who wants to know "
    "whether you are coming to dinner on Sunday."),
    # a short paragraph
    ("The library will close early on Friday for the staff training day. Books that are "
    "due that day can be returned on Saturday without any late fee. The reading room on "
    "the ground floor stays open until six, and the children's corner will host a story "
    "hour at four."),
    ("To reset your password, open the settings page and choose the security tab. Enter "
    "your current password, then type the new one twice. A good password is long and "
    "easy for you to remember, but hard for anyone else to guess."),
    ("The old lighthouse stood on the rocks at the edge of the bay for more than a hundred "
    "years. Every night its keeper climbed the narrow stairs to light the lamp, and every "
    "morning he wrote the weather in a thick leather book."),
    ("Welcome to the city gardens. The main path leads past the rose beds to the glass "
    "house, where you will find plants from the rain forests of South America. Please "
    "stay on the paths and do not feed the ducks in the pond."),
    ("Scientists have found that short walks after meals can help the body manage blood "
    "sugar. Even ten minutes of gentle movement seems to make a difference, especially "
    "for people who spend most of the day sitting at a desk."),
    ("When the bell rang, the children ran out into the yard. Some of them played football "
    "on the wet grass, while others sat on the low wall and traded cards. The teachers "
    "watched from the doorway with cups of tea in their hands."),
    # a long paragraph
    ("The village sits at the end of a long road that winds through the hills. In summer, "
    "visitors come to walk the trails and swim in the cold, clear lake below the old mill. "
    "In winter, the road is often closed by snow, and the few families who live there all "
    "year gather in the small inn to share news and food. The innkeeper, a tall man with "
    "a quiet voice, has kept the fire burning every evening for almost thirty years, and "
    "he likes to say that no storm has ever put it out."),
    ("Good evening and welcome to the program. Tonight we look at how cities are changing "
    "the way people move around. More and more streets are being closed to cars and opened "
    "to bicycles, buses and people on foot. Supporters say the changes make the air cleaner "
    "and the streets safer for children. Critics worry that shops will lose customers and "
    "that people who live far from the center will find it harder to get to work. We "
    "spoke to residents, planners and shop owners to hear both sides of the story."),
    ("Before you begin the assembly, lay out every part on a clean, flat surface and check "
    "them against the list on the first page. You will need a small screwdriver and a soft "
    "cloth. Start by attaching the four legs to the base, but do not tighten the screws "
    "fully until all of them are in place. Then turn the frame over, fit the top panel, "
    "and tighten every screw a little at a time, working around the frame, so that the "
    "table stands level and does not wobble."),
    ("The expedition set out before dawn, when the snow on the ridge was still hard enough "
    "to walk on. For the first few hours the climbers made good progress, moving in a "
    "single line and speaking only when they had to. By midday the sun had softened the "
    "surface, and every step sank deep into the slush. The leader called a halt below a "
    "wide crack in the ice, studied the sky for a long minute, and decided that they would "
    "camp there for the night and try for the summit the following morning."),
    ("Thank you all for coming today. When we started this project three years ago, we had "
    "a small office, two computers and a plan written on the back of an envelope. Since "
    "then, the team has grown to more than forty people, and our software is used by "
    "schools in eleven countries. None of that would have been possible without your hard "
    "work, your patience when things went wrong, and your willingness to try again. I want "
    "to thank every one of you, and I look forward to what we will build together next."),
    ("Rivers shape the land in ways that are easy to miss from one year to the next. Over "
    "centuries, a river can carve a deep valley through solid rock, carry soil hundreds of "
    "miles downstream, and build wide, fertile plains where it meets the sea. People have "
    "always settled along rivers because they offer water, food and an easy way to travel. "
    "But rivers also flood, and many towns have learned that lesson the hard way, building "
    "walls and channels that sometimes protect them and sometimes only move the danger to "
    "their neighbors downstream."),
)


def load_prompts(path: Path) -> list[str]:
    """One prompt per non-blank line of a UTF-8 text file."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    prompts = [line for line in lines if line]
    if not prompts:
        raise ValueError(f"{path} holds no prompts; write one prompt per line")
    return prompts


def pick(prompts: list[str] | tuple[str, ...], count: int, seed: int) -> list[str]:
    """`count` prompts in a seeded random order, cycling when more are asked than exist.

    Every concurrency level gets the same list, so levels differ only in load.
    """
    if count < 1:
        raise ValueError(f"the number of prompts must be at least 1, got {count}")
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < count:
        batch = list(prompts)
        rng.shuffle(batch)
        out.extend(batch)
    return out[:count]
