package main

import "strings"

// All word lists below were written for this program. Person names avoid
// month names (April, May, June, August) so that the no-pairing check of
// the corpus can look for month names as plain words.

var femaleNames = []string{
	"Anna", "Lena", "Mia", "Sara", "Nora", "Emma", "Clara", "Olivia", "Rosa",
	"Ines", "Maya", "Julia", "Hanna", "Eva", "Lucy", "Alice", "Grace", "Ruth",
	"Irene", "Tara", "Zoe", "Amira", "Leila", "Priya", "Yuki", "Elena", "Fatima",
	"Chloe", "Sofia", "Ada", "Nina", "Vera", "Greta", "Ella", "Iris", "Lila",
	"Mina", "Paula", "Dana", "Helen",
}

var maleNames = []string{
	"Tom", "Ben", "Leo", "Omar", "Hugo", "Max", "Sam", "Felix", "Oscar", "Ivan",
	"Luca", "Noah", "Adam", "Jonas", "Karl", "Paul", "Peter", "David", "Ravi",
	"Kenji", "Mateo", "Diego", "Tariq", "Elias", "Finn", "Arthur", "Henry",
	"Victor", "Theo", "Jack", "Ali", "Marco", "Nils", "Samuel", "Igor", "Kofi",
	"Emil", "Rafael", "Otto", "Simon",
}

var surnames = []string{
	"Berg", "Fischer", "Novak", "Silva", "Okafor", "Tanaka", "Moreau", "Rossi",
	"Larsen", "Kowalski", "Haddad", "Patel", "Costa", "Jensen", "Weber",
	"Ferreira", "Nakamura", "Brennan", "Lindqvist", "Alvarez", "Dubois",
	"Schmidt", "Mendes", "Quinn", "Sato", "Kaplan", "Hughes", "Ward", "Ellis",
	"Park", "Reyes", "Horvat", "Varga", "Nilsen", "Moretti", "Mensah", "Ortiz",
	"Holm", "Adler", "Bianchi", "Keller", "Fraser", "Nowak", "Lund", "Castro",
}

var cities = []string{
	"Lisbon", "Oslo", "Porto", "Lyon", "Vienna", "Prague", "Dublin", "Cairo",
	"Lima", "Quito", "Nairobi", "Accra", "Osaka", "Kyoto", "Seoul", "Hanoi",
	"Mumbai", "Delhi", "Perth", "Auckland", "Toronto", "Denver", "Boston",
	"Chicago", "Madrid", "Seville", "Naples", "Zurich", "Geneva", "Bergen",
	"Tallinn", "Riga", "Krakow", "Budapest", "Athens", "Tunis", "Dakar",
	"Bogota", "Havana", "Montreal", "Glasgow", "Cardiff", "Leeds", "Hamburg",
	"Munich", "Bologna", "Valencia", "Helsinki", "Ghent", "Split",
}

var townPlaces = []string{
	"the market", "the library", "the park", "the bakery", "the station",
	"the river", "the harbour", "the school", "the post office", "the museum",
	"the garden", "the beach", "the farm", "the bridge", "the old mill",
	"the square", "the cafe", "the bookshop", "the pool", "the zoo",
}

// noun is a countable noun with its plural.
type noun struct{ sg, pl string }

// regular builds nouns whose plural adds "s".
func regular(sg ...string) []noun {
	out := make([]noun, len(sg))
	for i, s := range sg {
		out[i] = noun{s, s + "s"}
	}
	return out
}

func concat[T any](parts ...[]T) []T {
	var out []T
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func (n noun) count(k int) string {
	if k == 1 {
		return "1 " + n.sg
	}
	return itoa(k) + " " + n.pl
}

func (n noun) countWords(k int) string {
	if k == 1 {
		return "one " + n.sg
	}
	return words(k) + " " + n.pl
}

var objects = concat(regular(
	"key", "cup", "lamp", "book", "chair", "hat", "bag", "umbrella", "bottle",
	"basket", "map", "letter", "clock", "kite", "bicycle", "ladder", "blanket",
	"pencil", "notebook", "spoon", "candle", "bucket", "shovel", "jacket",
	"shoe", "ticket", "coin", "ring", "mirror", "radio", "camera", "envelope",
	"hammer", "rope", "plate", "bowl", "pillow", "toy", "ball", "drum",
	"violin", "guitar", "stamp", "teapot", "postcard", "backpack", "lantern",
	"puzzle", "button", "wallet",
), []noun{
	{"box", "boxes"}, {"knife", "knives"}, {"glass", "glasses"},
	{"scarf", "scarves"}, {"brush", "brushes"}, {"watch", "watches"},
	{"dish", "dishes"}, {"bench", "benches"},
})

// smallObjects fit in a bag.
var smallObjects = concat(regular(
	"key", "cup", "book", "pencil", "notebook", "spoon", "candle", "ticket",
	"coin", "ring", "envelope", "stamp", "postcard", "button", "wallet", "map",
	"letter", "ball", "toy", "marble",
), []noun{{"watch", "watches"}, {"brush", "brushes"}, {"scarf", "scarves"}})

var farmAnimals = concat(regular(
	"goat", "cow", "pig", "hen", "duck", "horse", "donkey", "rabbit", "lamb",
), []noun{{"sheep", "sheep"}, {"goose", "geese"}})

var pets = concat(regular(
	"cat", "dog", "rabbit", "parrot", "turtle", "hedgehog", "hamster", "goldfish",
	"canary", "tortoise",
), []noun{{"mouse", "mice"}})

var petColors = []string{"black", "white", "brown", "grey", "ginger", "spotted", "striped", "golden"}

var socialEvents = []string{
	"the party", "the wedding", "the picnic", "the concert", "the dinner",
	"the birthday party", "the garden party", "the book club", "the barbecue",
}

var animals = concat(regular(
	"cat", "dog", "horse", "owl", "rabbit", "goat", "duck", "cow", "pig", "hen",
	"bird", "frog", "bear", "squirrel", "turtle", "donkey", "parrot",
	"hedgehog", "lamb", "crow", "beetle", "swan", "otter",
), []noun{
	{"fox", "foxes"}, {"sheep", "sheep"}, {"mouse", "mice"}, {"goose", "geese"},
	{"deer", "deer"}, {"wolf", "wolves"},
})

var countFoods = concat(regular(
	"apple", "pear", "egg", "lemon", "orange", "carrot", "onion", "banana",
	"plum", "cookie", "muffin", "pie", "cucumber", "melon", "biscuit",
	"pancake", "grape", "bun", "pepper", "apricot",
), []noun{
	{"potato", "potatoes"}, {"tomato", "tomatoes"}, {"peach", "peaches"},
	{"sandwich", "sandwiches"}, {"cherry", "cherries"}, {"strawberry", "strawberries"},
})

// massFood is a food counted by a container: "a loaf of bread".
type massFood struct{ name, unit string }

// buyFoods are sold by the container.
var buyFoods = []massFood{
	{"bread", "loaf"}, {"rice", "bag"}, {"cheese", "block"}, {"honey", "jar"},
	{"butter", "block"}, {"jam", "jar"}, {"yogurt", "pot"}, {"flour", "bag"},
	{"sugar", "bag"}, {"chocolate", "bar"}, {"water", "bottle"}, {"oil", "bottle"},
	{"milk", "bottle"}, {"tea", "box"}, {"coffee", "bag"}, {"salt", "bag"},
	{"oats", "box"}, {"olives", "jar"},
}

// mealFoods are served by the portion.
var mealFoods = []massFood{
	{"soup", "bowl"}, {"bread", "slice"}, {"cheese", "piece"}, {"pasta", "plate"},
	{"salad", "bowl"}, {"yogurt", "pot"}, {"chocolate", "piece"}, {"cake", "slice"},
	{"rice", "bowl"}, {"porridge", "bowl"}, {"pie", "slice"}, {"stew", "plate"},
}

func (f massFood) phrase() string {
	unit := f.unit
	return withArticle(unit) + " of " + f.name
}

func (f massFood) phraseN(k int) string {
	if k == 1 {
		return f.phrase()
	}
	unit := f.unit + "s"
	switch f.unit {
	case "loaf":
		unit = "loaves"
	case "glass":
		unit = "glasses"
	case "box":
		unit = "boxes"
	}
	return words(k) + " " + unit + " of " + f.name
}

var jobs = []string{
	"baker", "teacher", "nurse", "engineer", "farmer", "pilot", "doctor",
	"painter", "carpenter", "gardener", "librarian", "bus driver", "cook",
	"musician", "tailor", "fisher", "dentist", "architect", "electrician",
	"plumber", "writer", "photographer", "mechanic", "pharmacist", "artist",
	"shopkeeper", "mail carrier", "editor", "judge", "vet", "waiter",
	"accountant", "firefighter", "potter", "translator",
}

var colors = []string{
	"red", "blue", "green", "yellow", "white", "black", "brown", "grey",
	"orange", "purple", "pink", "silver", "gold",
}

var objAdjectives = []string{
	"small", "big", "old", "new", "heavy", "tiny", "shiny", "broken", "clean",
	"dusty", "round", "empty", "lovely", "strange", "cheap", "large", "light",
	"plain", "little", "long",
}

var personAdjectives = []string{
	"happy", "tired", "calm", "busy", "hungry", "curious", "cheerful", "sleepy",
	"proud", "nervous", "kind", "brave", "quiet", "patient", "careful", "glad",
}

// feelings suit "She felt ..." and "He was ... after the long day".
var feelings = []string{
	"happy", "tired", "calm", "hungry", "sleepy", "proud", "glad", "cheerful",
	"relaxed", "thirsty", "pleased", "restless",
}

var weathers = []string{
	"sunny", "rainy", "windy", "cold", "warm", "foggy", "cloudy", "snowy",
	"hot", "grey", "clear", "stormy",
}

var relatives = []string{
	"sister", "brother", "mother", "father", "aunt", "uncle", "cousin",
	"grandmother", "grandfather", "friend", "neighbour", "daughter", "son",
}

var events = []string{
	"the concert", "the meeting", "the school trip", "the party",
	"the market day", "the race", "the wedding", "the exam", "the festival",
	"the football match", "the book fair", "the garden show", "the parade",
	"the chess club", "the swimming lesson", "the town fair", "the picnic",
	"the art class", "the choir practice", "the job interview",
}

// verb has its base, third-person singular and past forms.
type verb struct{ base, s, past string }

// transitive verbs that take a concrete object.
var objVerbs = []verb{
	{"find", "finds", "found"}, {"buy", "buys", "bought"},
	{"carry", "carries", "carried"}, {"paint", "paints", "painted"},
	{"clean", "cleans", "cleaned"}, {"lose", "loses", "lost"},
	{"fix", "fixes", "fixed"}, {"drop", "drops", "dropped"},
	{"open", "opens", "opened"}, {"wash", "washes", "washed"},
	{"sell", "sells", "sold"}, {"bring", "brings", "brought"},
	{"hide", "hides", "hid"}, {"take", "takes", "took"},
	{"make", "makes", "made"}, {"draw", "draws", "drew"},
	{"choose", "chooses", "chose"}, {"catch", "catches", "caught"},
	{"hold", "holds", "held"}, {"keep", "keeps", "kept"},
	{"borrow", "borrows", "borrowed"}, {"pack", "packs", "packed"},
	{"wrap", "wraps", "wrapped"}, {"move", "moves", "moved"},
	{"check", "checks", "checked"}, {"pick up", "picks up", "picked up"},
	{"polish", "polishes", "polished"}, {"mend", "mends", "mended"},
	{"weigh", "weighs", "weighed"}, {"return", "returns", "returned"},
}

// travelVerbs move a person to a place ("walked to").
var travelVerbs = []verb{
	{"walk", "walks", "walked"}, {"go", "goes", "went"},
	{"cycle", "cycles", "cycled"}, {"run", "runs", "ran"},
	{"drive", "drives", "drove"}, {"hurry", "hurries", "hurried"},
	{"take the bus", "takes the bus", "took the bus"},
}

// longTravelVerbs move a person to a city.
var longTravelVerbs = []verb{
	{"fly", "flies", "flew"}, {"travel", "travels", "travelled"},
	{"move", "moves", "moved"}, {"take the train", "takes the train", "took the train"},
	{"drive", "drives", "drove"}, {"go", "goes", "went"},
}

// activity is a verb phrase; "{pos}" in it is replaced by a possessive
// pronoun that agrees with the subject.
type activity struct{ base, s, past string }

var activities = []activity{
	{"read a book", "reads a book", "read a book"},
	{"play chess", "plays chess", "played chess"},
	{"bake a cake", "bakes a cake", "baked a cake"},
	{"write a letter", "writes a letter", "wrote a letter"},
	{"feed the cat", "feeds the cat", "fed the cat"},
	{"water the plants", "waters the plants", "watered the plants"},
	{"visit {pos} grandmother", "visits {pos} grandmother", "visited {pos} grandmother"},
	{"clean the kitchen", "cleans the kitchen", "cleaned the kitchen"},
	{"paint the fence", "paints the fence", "painted the fence"},
	{"fix the old bicycle", "fixes the old bicycle", "fixed the old bicycle"},
	{"plant tomatoes", "plants tomatoes", "planted tomatoes"},
	{"go for a walk", "goes for a walk", "went for a walk"},
	{"call {pos} sister", "calls {pos} sister", "called {pos} sister"},
	{"sing in the choir", "sings in the choir", "sang in the choir"},
	{"swim in the lake", "swims in the lake", "swam in the lake"},
	{"cook dinner", "cooks dinner", "cooked dinner"},
	{"wash the car", "washes the car", "washed the car"},
	{"fly a kite", "flies a kite", "flew a kite"},
	{"sweep the floor", "sweeps the floor", "swept the floor"},
	{"tidy {pos} room", "tidies {pos} room", "tidied {pos} room"},
	{"learn a new song", "learns a new song", "learned a new song"},
	{"draw a map of the town", "draws a map of the town", "drew a map of the town"},
	{"pick apples", "picks apples", "picked apples"},
	{"mend a shirt", "mends a shirt", "mended a shirt"},
	{"build a bird house", "builds a bird house", "built a bird house"},
	{"watch a film", "watches a film", "watched a film"},
	{"ride {pos} bicycle", "rides {pos} bicycle", "rode {pos} bicycle"},
	{"do the shopping", "does the shopping", "did the shopping"},
	{"take photos of the river", "takes photos of the river", "took photos of the river"},
	{"sort old letters", "sorts old letters", "sorted old letters"},
	{"practise the piano", "practises the piano", "practised the piano"},
	{"run five kilometres", "runs five kilometres", "ran five kilometres"},
	{"make soup", "makes soup", "made soup"},
	{"repair the roof", "repairs the roof", "repaired the roof"},
	{"study for the exam", "studies for the exam", "studied for the exam"},
}

func (a activity) with(pos string) activity {
	r := strings.NewReplacer("{pos}", pos)
	return activity{r.Replace(a.base), r.Replace(a.s), r.Replace(a.past)}
}

// animalMoves pair a past-tense animal verb with prepositions that suit it.
var animalMoves = []struct {
	past  string
	preps []string
}{
	{"ran", []string{"under", "behind", "across", "past", "around"}},
	{"jumped", []string{"over", "onto", "off"}},
	{"slept", []string{"under", "near", "behind", "on"}},
	{"hid", []string{"under", "behind", "inside"}},
	{"sat", []string{"on", "near", "under", "beside"}},
	{"climbed", []string{"onto", "over", "up"}},
	{"waited", []string{"near", "behind", "beside"}},
}

var animalPlaces = []string{
	"fence", "tree", "table", "bench", "wall", "bridge", "car", "gate", "shed",
	"bush", "barn", "sofa", "hedge", "boat", "woodpile",
}

var locations = []string{
	"on the table", "under the bed", "in the blue box", "next to the door",
	"in the kitchen", "behind the sofa", "on the top shelf", "in your bag",
	"in the car", "by the window", "in the garden shed", "on the desk",
	"in the hall", "under the stairs",
}

var timesOfDay = []string{
	"In the morning", "After lunch", "Later that day", "In the evening",
	"The next day", "At noon", "Before breakfast", "After dinner",
	"In the afternoon", "Two days later", "Soon after", "That night",
}

var services = []string{
	"web", "db", "cache", "queue", "auth", "billing", "search", "mailer",
	"scheduler", "backup", "api", "worker", "storage", "metrics",
}

var syllables = []string{
	"ka", "lo", "mi", "ne", "ru", "ta", "vo", "si", "pe", "du", "ko", "ri",
	"za", "mu", "fe", "lan", "tor", "bel", "min", "sor", "pi", "go", "ha",
	"ven", "dal", "ti", "no", "be",
}
