package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Row length bounds of the pretraining corpus, in bytes (the corpus is
// ASCII, so also in characters).
const (
	minRow = 200
	maxRow = 800
)

func itoa(n int) string { return strconv.Itoa(n) }

// gen holds the random stream of the corpus generators.
type gen struct{ r *rng }

type person struct {
	first, last string
	female      bool
}

func (p person) full() string { return p.first + " " + p.last }

func (p person) he() string {
	if p.female {
		return "she"
	}
	return "he"
}

func (p person) him() string {
	if p.female {
		return "her"
	}
	return "him"
}

func (p person) his() string {
	if p.female {
		return "her"
	}
	return "his"
}

func (g *gen) person() person {
	if g.r.chance(0.5) {
		return person{pick(g.r, femaleNames), pick(g.r, surnames), true}
	}
	return person{pick(g.r, maleNames), pick(g.r, surnames), false}
}

// people returns n persons with distinct first and last names.
func (g *gen) people(n int) []person {
	var out []person
	for len(out) < n {
		p := g.person()
		ok := true
		for _, q := range out {
			if q.first == p.first || q.last == p.last {
				ok = false
			}
		}
		if ok {
			out = append(out, p)
		}
	}
	return out
}

// date draws a corpus date: mostly in the task's year range, sometimes
// outside it.
func (g *gen) date() date {
	y := g.r.between(minYear, maxYear)
	if g.r.chance(0.15) {
		y = g.r.between(1900, 2099)
	}
	m := time.Month(g.r.between(1, 12))
	return date{y, m, g.r.between(1, daysIn(y, m))}
}

// birthDate draws a date of birth in the past.
func (g *gen) birthDate() date {
	y := g.r.between(1925, 2015)
	m := time.Month(g.r.between(1, 12))
	return date{y, m, g.r.between(1, daysIn(y, m))}
}

// later moves *now forward by up to a few weeks and returns it, so that the
// dates of one story follow each other.
func (g *gen) later(now *date) date {
	*now = now.add(g.r.between(0, 25))
	return *now
}

// longDate writes a date with its year in one of the long forms. The US
// form, the task's target, is the most common.
func (g *gen) longDate(d date) string {
	switch x := g.r.intn(20); {
	case x < 11:
		return d.us()
	case x < 15:
		return d.uk()
	case x < 18:
		return d.weekday() + ", " + d.us()
	default:
		return d.weekday() + ", " + d.uk()
	}
}

// shortDate writes a date without its year.
func (g *gen) shortDate(d date) string {
	switch g.r.intn(6) {
	case 0, 1:
		return d.monthDay()
	case 2:
		return d.monthOrd()
	case 3, 4:
		return d.ofMonth()
	default:
		return "the " + ordinalWord(d.d) + " of " + d.m.String()
	}
}

// anyDate writes a date in any long or short form, or only a weekday.
func (g *gen) anyDate(d date) string {
	switch x := g.r.intn(10); {
	case x < 6:
		return g.longDate(d)
	case x < 9:
		return g.shortDate(d)
	default:
		return d.weekday()
	}
}

func (g *gen) clock() string {
	return fmt.Sprintf("%d:%02d", g.r.between(6, 21), 5*g.r.intn(12))
}

// objPhrase is an object with optional adjectives and no article: "small red cup".
func (g *gen) objPhrase(n noun) string {
	switch g.r.intn(4) {
	case 0:
		return n.sg
	case 1:
		return pick(g.r, objAdjectives) + " " + n.sg
	case 2:
		return pick(g.r, colors) + " " + n.sg
	default:
		return pick(g.r, objAdjectives) + " " + pick(g.r, colors) + " " + n.sg
	}
}

func (g *gen) madeUpWord() string {
	var b strings.Builder
	for i := g.r.between(2, 3); i > 0; i-- {
		b.WriteString(pick(g.r, syllables))
	}
	return b.String()
}

func (g *gen) code() string {
	letter := func() byte { return byte('A' + g.r.intn(26)) }
	switch g.r.intn(3) {
	case 0:
		return fmt.Sprintf("%c%c-%04d", letter(), letter(), g.r.intn(10000))
	case 1:
		return fmt.Sprintf("%c%d%c%d", letter(), g.r.intn(10), letter(), g.r.between(10, 99))
	default:
		return fmt.Sprintf("%d-%c%c%c", g.r.between(100, 999), letter(), letter(), letter())
	}
}

// grow appends units to s, joined by sep, until s reaches target bytes.
// Units that would push s past maxRow are skipped; after a few such misses
// the paragraph ends where it is.
func (g *gen) grow(s, sep string, target int, unit func() string) string {
	for misses := 0; len(s) < target && misses < 6; {
		u := unit()
		if len(s)+len(sep)+len(u) > maxRow {
			misses++
			continue
		}
		if s == "" {
			s = u
		} else {
			s += sep + u
		}
	}
	return s
}

// ---- narrative ----

func (g *gen) narrative(target int) string {
	r := g.r
	p := g.person()
	city := pick(r, cities)
	now := g.date()
	var open string
	switch r.intn(6) {
	case 0:
		open = fmt.Sprintf("%s lived in %s and worked as %s.", p.full(), city, withArticle(pick(r, jobs)))
	case 1:
		open = fmt.Sprintf("On %s, %s %s to %s.", g.longDate(now), p.full(), pick(r, longTravelVerbs).past, city)
	case 2:
		open = fmt.Sprintf("%s was %s %s from %s.", p.full(), withArticle(pick(r, personAdjectives)), pick(r, jobs), city)
	case 3:
		open = fmt.Sprintf("It was %s %s in %s, and %s was %s.", withArticle(pick(r, weathers)), pick(r, weekdayNames), city, p.full(), pick(r, personAdjectives))
	case 4:
		now.d = 1
		open = fmt.Sprintf("Last %s, %s visited %s %s in %s.", now.m, p.full(), p.his(), pick(r, relatives), city)
	default:
		born := g.birthDate()
		now = born.add(r.between(20*365, 60*365))
		open = fmt.Sprintf("%s was born on %s in %s. In %d, %s worked as %s there.", p.full(), g.longDate(born), city, now.y, p.he(), withArticle(pick(r, jobs)))
	}
	var other *person
	used := map[int]int{}
	return g.grow(open, " ", target, func() string { return g.narrativeSentence(p, &other, city, &now, used) })
}

// narrativeSentence continues a story about p. used counts the templates
// already used in the paragraph; none is used more than twice.
func (g *gen) narrativeSentence(p person, other **person, city string, now *date, used map[int]int) string {
	r := g.r
	// S is the subject at the start of a sentence, s inside one.
	S, s := p.first, p.first
	if r.chance(0.6) {
		S, s = capitalize(p.he()), p.he()
	}
	c := r.intn(18)
	for used[c] >= 2 {
		c = r.intn(18)
	}
	used[c]++
	switch c {
	case 0:
		o := pick(r, objects)
		v := pick(r, objVerbs)
		place := ""
		if placeVerbs[v.past] && r.chance(0.6) {
			place = " " + pick(r, []string{"at", "near", "behind", "next to"}) + " " + pick(r, townPlaces)
		}
		return fmt.Sprintf("%s %s %s%s.", S, v.past, withArticle(g.objPhrase(o)), place)
	case 1:
		return fmt.Sprintf("%s, %s %s.", pick(r, timesOfDay), s, pick(r, activities).with(p.his()).past)
	case 2:
		return fmt.Sprintf("%s %s to %s.", S, pick(r, travelVerbs).past, pick(r, townPlaces))
	case 3:
		if *other == nil {
			q := g.people(2)[1]
			for q.first == p.first {
				q = g.person()
			}
			*other = &q
			return fmt.Sprintf("At %s, %s met %s, %s.", pick(r, townPlaces), s, q.full(), withArticle(pick(r, jobs)))
		}
		q := **other
		return fmt.Sprintf("%s and %s %s together.", p.first, q.first, pick(r, activities).with("their").past)
	case 4:
		var food string
		if r.chance(0.5) {
			food = withArticle(pick(r, countFoods).sg)
		} else {
			food = pick(r, mealFoods).phrase()
		}
		drink := pick(r, []string{"a cup of tea", "a glass of milk", "a cup of coffee", "a glass of juice", "some water", "a bottle of water"})
		return fmt.Sprintf("%s ate %s and drank %s.", S, food, drink)
	case 5:
		f := pick(r, countFoods)
		m := pick(r, buyFoods)
		return fmt.Sprintf("%s bought %s and %s.", S, f.countWords(r.between(2, 12)), m.phraseN(r.between(1, 3)))
	case 6:
		a := pick(r, animals)
		mv := pick(r, animalMoves)
		det := "The"
		if r.chance(0.5) {
			det = capitalize(article(a.sg))
		}
		adj := ""
		if r.chance(0.4) {
			adj = pick(r, []string{"small ", "little ", "young ", "old ", "grey ", "brown ", "white ", "black "})
			if det != "The" {
				det = capitalize(article(adj))
			}
		}
		sent := fmt.Sprintf("%s %s%s %s %s the %s.", det, adj, a.sg, mv.past, pick(r, mv.preps), pick(r, animalPlaces))
		if r.chance(0.5) {
			sent += fmt.Sprintf(" %s watched it for a while.", capitalize(p.he()))
		}
		return sent
	case 7:
		if r.chance(0.5) {
			return fmt.Sprintf("%s felt %s.", S, pick(r, feelings))
		}
		return fmt.Sprintf("%s was %s after the long day.", S, pick(r, feelings))
	case 8:
		o := pick(r, objects)
		if *other != nil {
			return fmt.Sprintf("%s gave the %s to %s.", S, o.sg, (*other).first)
		}
		return fmt.Sprintf("%s gave %s %s %s.", S, p.his(), pick(r, relatives), withArticle(g.objPhrase(o)))
	case 9:
		var quote string
		switch r.intn(5) {
		case 0:
			quote = fmt.Sprintf("See you on %s!", pick(r, weekdayNames))
		case 1:
			quote = fmt.Sprintf("The %s is ready.", pick(r, objects).sg)
		case 2:
			quote = fmt.Sprintf("Come to %s at %d o'clock.", pick(r, townPlaces), r.between(1, 12))
		case 3:
			quote = fmt.Sprintf("I will be in %s until %s.", pick(r, cities), g.shortDate(g.later(now)))
		default:
			quote = "Happy birthday!"
		}
		return fmt.Sprintf("%s %s called and said, \"%s\"", capitalize(p.his()), pick(r, relatives), quote)
	case 10:
		return fmt.Sprintf("%s did not %s that day.", S, pick(r, activities).with(p.his()).base)
	case 11:
		return fmt.Sprintf("%s planned to %s on %s.", S, pick(r, activities).with(p.his()).base, g.anyDate(g.later(now)))
	case 12:
		if r.chance(0.5) {
			return fmt.Sprintf("The weather was %s.", pick(r, weathers))
		}
		return fmt.Sprintf("It was %s all day in %s.", pick(r, weathers), city)
	case 13:
		return fmt.Sprintf("%s had %s in %s bag.", S, pick(r, smallObjects).countWords(r.between(2, 9)), p.his())
	case 14:
		return fmt.Sprintf("On %s, %s %s.", g.anyDate(g.later(now)), s, pick(r, activities).with(p.his()).past)
	case 15:
		return fmt.Sprintf("%s stayed in %s until %s.", S, pick(r, cities), g.anyDate(g.later(now)))
	case 16:
		return fmt.Sprintf("%s wrote the date at the top of the page: %s.", S, g.longDate(g.later(now)))
	default:
		return fmt.Sprintf("Every %s, %s used to %s.", pick(r, weekdayNames), s, pick(r, activities).with(p.his()).base)
	}
}

// placeVerbs are the past tenses that read well with "near the river".
var placeVerbs = map[string]bool{
	"found": true, "lost": true, "dropped": true, "hid": true, "painted": true,
	"cleaned": true, "opened": true, "washed": true, "picked up": true,
	"sold": true, "held": true, "drew": true,
}

// ---- dialogue ----

// exchange returns a question from asker and an answer from answerer.
func (g *gen) exchange(asker, answerer person) (string, string) {
	r := g.r
	switch r.intn(18) {
	case 0:
		o := pick(r, objects)
		return fmt.Sprintf("Where is the %s?", o.sg), fmt.Sprintf("It is %s.", pick(r, locations))
	case 1:
		d := g.date()
		if r.chance(0.6) {
			return "What day is it today?", fmt.Sprintf("It is %s, %s.", d.weekday(), d.us())
		}
		return "What is the date today?", fmt.Sprintf("Today is %s.", g.longDate(d))
	case 2:
		d := g.date()
		if r.chance(0.5) {
			return "When is your birthday?", fmt.Sprintf("My birthday is on %s.", d.ofMonth())
		}
		return "When were you born?", fmt.Sprintf("I was born on %s.", g.longDate(g.birthDate()))
	case 3:
		o := pick(r, objects)
		k := r.between(1, 20)
		if k == 1 {
			return fmt.Sprintf("How many %s do we have?", o.pl), fmt.Sprintf("We have only one %s.", o.sg)
		}
		return fmt.Sprintf("How many %s do we have?", o.pl), fmt.Sprintf("We have %s.", o.countWords(k))
	case 4:
		a := pick(r, animals)
		if r.chance(0.6) {
			mv := pick(r, animalMoves)
			return fmt.Sprintf("Did you see the %s?", a.sg), fmt.Sprintf("Yes, it %s %s the %s.", mv.past, pick(r, mv.preps), pick(r, animalPlaces))
		}
		return fmt.Sprintf("Did you see the %s?", a.sg), "No, I did not see it."
	case 5:
		a, b := r.between(1, 50), r.between(1, 50)
		return fmt.Sprintf("What is %d plus %d?", a, b), fmt.Sprintf("%d plus %d is %d.", a, b, a+b)
	case 6:
		o := pick(r, objects)
		return fmt.Sprintf("Can you bring %s?", withArticle(o.sg)), fmt.Sprintf("Yes, I will bring it on %s.", pick(r, weekdayNames))
	case 7:
		return "Where do you live?", fmt.Sprintf("I live in %s. I moved there in %s %d.", pick(r, cities), pick(r, monthNames), g.date().y)
	case 8:
		return "What do you do?", fmt.Sprintf("I am %s. I work in %s.", withArticle(pick(r, jobs)), pick(r, cities))
	case 9:
		return "When does the train leave?", fmt.Sprintf("It leaves at %s on %s.", g.clock(), pick(r, weekdayNames))
	case 10:
		w := pick(r, weekdayNames)
		return fmt.Sprintf("What did you do on %s?", w), fmt.Sprintf("I %s with my %s.", pick(r, activities).with("my").past, pick(r, relatives))
	case 11:
		w := pick(r, weekdayNames)
		place := strings.TrimPrefix(pick(r, []string{"the bakery", "the library", "the museum", "the pool", "the bookshop", "the cafe", "the post office"}), "the ")
		if r.chance(0.5) {
			return fmt.Sprintf("Is the %s open on %s?", place, w), fmt.Sprintf("No, it is closed every %s.", w)
		}
		return fmt.Sprintf("Is the %s open on %s?", place, w), fmt.Sprintf("Yes, it is open every %s until %d o'clock.", w, r.between(4, 9))
	case 12:
		c := pick(r, cities)
		return fmt.Sprintf("When did you move to %s?", c), fmt.Sprintf("I moved to %s on %s.", c, g.longDate(g.date()))
	case 13:
		return "What is your favorite color?", fmt.Sprintf("I like %s best.", pick(r, colors))
	case 14:
		p := g.person()
		return "Who called?", fmt.Sprintf("%s called. %s wants to talk to you.", p.full(), p.full())
	case 15:
		e := pick(r, events)
		d := g.date()
		return fmt.Sprintf("What is the date of %s?", e), fmt.Sprintf("%s is on %s.", capitalize(e), g.longDate(d))
	case 16:
		c := g.code()
		return fmt.Sprintf("Please remember the code %s.", c), fmt.Sprintf("Yes, the code is %s.", c)
	default:
		f := pick(r, countFoods)
		return fmt.Sprintf("Are there any %s left?", f.pl), fmt.Sprintf("There are %s on the %s.", f.countWords(r.between(2, 9)), pick(r, []string{"table", "shelf", "counter", "plate"}))
	}
}

func (g *gen) dialogue(target int) string {
	r := g.r
	ps := g.people(2)
	a, b := ps[0], ps[1]
	quoted := r.chance(0.35)
	var head string
	if !quoted || r.chance(0.5) {
		head = fmt.Sprintf("%s and %s talked at %s.", a.first, b.first, pick(r, townPlaces))
	}
	sep := "\n"
	if quoted && r.chance(0.5) {
		sep = " "
	}
	return g.grow(head, sep, target, func() string {
		asker, answerer := a, b
		if r.chance(0.5) {
			asker, answerer = b, a
		}
		q, ans := g.exchange(asker, answerer)
		if !quoted {
			return fmt.Sprintf("%s: %s\n%s: %s", asker.first, q, answerer.first, ans)
		}
		askVerb := "asked"
		if !strings.HasSuffix(q, "?") {
			askVerb = "said"
			q = strings.TrimSuffix(q, ".") + ","
		}
		said := pick(r, []string{"said", "answered", "replied"})
		return fmt.Sprintf("\"%s\" %s %s. \"%s,\" %s %s.", q, askVerb, asker.first, strings.TrimSuffix(ans, "."), said, answerer.first)
	})
}

// ---- lists ----

func (g *gen) listBlock() string {
	r := g.r
	switch r.intn(12) {
	case 0:
		var lines []string
		for _, f := range pickN(r, countFoods, r.between(2, 4)) {
			lines = append(lines, "- "+f.count(r.between(2, 12)))
		}
		for _, m := range pickN(r, buyFoods, r.between(1, 3)) {
			lines = append(lines, "- "+m.phrase())
		}
		r.shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
		return fmt.Sprintf("Shopping list for %s:\n%s", pick(r, weekdayNames), strings.Join(lines, "\n"))
	case 1:
		p := g.person()
		var items []string
		for _, o := range pickN(r, smallObjects, r.between(3, 5)) {
			items = append(items, withArticle(g.objPhrase(o)))
		}
		return fmt.Sprintf("%s packed these things for the trip to %s on %s: %s.", p.full(), pick(r, cities), g.longDate(g.date()), join(items))
	case 2:
		var lines []string
		for i, a := range pickN(r, activities, r.between(3, 5)) {
			lines = append(lines, fmt.Sprintf("%d. %s", i+1, a.with("my").base))
		}
		return fmt.Sprintf("Things to do on %s:\n%s", g.anyDate(g.date()), strings.Join(lines, "\n"))
	case 3:
		start := r.intn(7)
		days := append(append([]string{}, weekdayNames[start:]...), weekdayNames[:start]...)
		if start == 0 {
			return "The days of the week are " + join(days) + "."
		}
		return fmt.Sprintf("The days of the week, starting from %s, are %s.", days[0], join(days))
	case 4:
		i := r.intn(10)
		j := r.between(i+2, 11)
		if i == 0 && j == 11 {
			return "The months of the year are " + join(monthNames) + "."
		}
		return fmt.Sprintf("The months from %s to %s are %s.", monthNames[i], monthNames[j], join(monthNames[i:j+1]))
	case 5:
		p := g.person()
		as := pickN(r, pets, r.between(2, 4))
		var items []string
		for _, a := range as {
			items = append(items, withArticle(a.sg))
		}
		return fmt.Sprintf("%s has %s pets: %s.", p.first, words(len(as)), join(items))
	case 6:
		o := pick(r, objects)
		cs := pickN(r, colors, r.between(2, 5))
		return fmt.Sprintf("The %s in the shop come in %s colors: %s.", o.pl, words(len(cs)), join(cs))
	case 7:
		var items []string
		for _, a := range pickN(r, farmAnimals, r.between(3, 5)) {
			if k := r.between(1, 15); k == 1 {
				items = append(items, withArticle(a.sg))
			} else {
				items = append(items, a.count(k))
			}
		}
		return "Animals on the farm: " + join(items) + "."
	case 8:
		var lines []string
		for _, p := range g.people(r.between(3, 5)) {
			lines = append(lines, "- "+p.full())
		}
		return fmt.Sprintf("Guests for %s on %s:\n%s", pick(r, socialEvents), g.longDate(g.date()), strings.Join(lines, "\n"))
	case 9:
		var lines []string
		for _, p := range g.people(r.between(3, 5)) {
			lines = append(lines, fmt.Sprintf("- %s: %s", p.first, g.shortDate(g.date())))
		}
		return fmt.Sprintf("Birthdays in the %s:\n%s", pick(r, []string{"class", "team", "family", "choir", "office"}), strings.Join(lines, "\n"))
	case 10:
		var items []string
		for _, p := range g.people(r.between(3, 4)) {
			items = append(items, fmt.Sprintf("%s (%s)", p.first, pick(r, jobs)))
		}
		return "People on our street: " + join(items) + "."
	default:
		p := g.person()
		cs := pickN(r, cities, r.between(2, 5))
		return fmt.Sprintf("%s has visited %s cities: %s.", p.first, words(len(cs)), join(cs))
	}
}

func (g *gen) list(target int) string {
	return g.grow("", "\n", target, g.listBlock)
}

// ---- records ----

// ageOn is the age on day at of a person born on born.
func ageOn(born, at date) int {
	age := at.y - born.y
	if at.m < born.m || (at.m == born.m && at.d < born.d) {
		age--
	}
	return age
}

func (g *gen) email(p person) string {
	return strings.ToLower(p.first+"."+p.last) + "@example.com"
}

func (g *gen) phone() string {
	return fmt.Sprintf("0%d %03d %03d", g.r.between(100, 999), g.r.intn(1000), g.r.intn(1000))
}

// personRecord writes a key: value record, then often a summary that
// repeats some of its values verbatim. With iso, dates are ISO and no month
// name appears; otherwise dates are long forms.
func (g *gen) personRecord(iso bool) string {
	r := g.r
	p := g.person()
	city := pick(r, cities)
	job := pick(r, jobs)
	updated := date{r.between(1990, 2025), time.Month(r.between(1, 12)), 1}
	updated.d = r.between(1, daysIn(updated.y, updated.m))
	born := updated.add(-r.between(18*365, 80*365))
	age := ageOn(born, updated)
	title := r.chance(0.5)
	key := func(k string) string {
		if title {
			return capitalize(k)
		}
		return k
	}
	var lines []string
	add := func(k, v string) { lines = append(lines, key(k)+": "+v) }
	add("name", p.full())
	add("city", city)
	if iso {
		add("date of birth", born.iso())
		add("age", itoa(age))
	} else {
		add(pick(r, []string{"born", "date of birth", "birthday"}), g.longDate(born))
	}
	add("job", job)
	if r.chance(0.4) {
		add("phone", g.phone())
	}
	if r.chance(0.3) {
		add("email", g.email(p))
	}
	if r.chance(0.3) {
		add("pet", withArticle(pick(r, petColors)+" "+pick(r, pets).sg))
	}
	if r.chance(0.3) {
		add("favorite food", pick(r, countFoods).pl)
	}
	if iso {
		if r.chance(0.5) {
			add("member since", updated.add(-r.between(0, max(0, age-18)*365)).iso())
		}
		add("updated", updated.iso())
	}
	rec := strings.Join(lines, "\n")
	if r.chance(0.25) {
		return rec
	}
	var sum string
	switch {
	case iso && r.chance(0.5):
		sum = fmt.Sprintf("Summary: %s, %d, %s, %s.", p.full(), age, job, city)
	case iso:
		sum = fmt.Sprintf("%s lives in %s and was born on %s. %s is %d years old.", p.full(), city, born.iso(), capitalize(p.he()), age)
	case r.chance(0.5):
		sum = fmt.Sprintf("Summary: %s, %s, %s, born %s.", p.full(), job, city, born.us())
	default:
		sum = fmt.Sprintf("%s is %s from %s. %s was born on %s.", p.full(), withArticle(job), city, p.first, born.us())
	}
	return rec + "\n" + sum
}

func (g *gen) itemRecord(iso bool) string {
	r := g.r
	o := pick(r, objects)
	name := g.objPhrase(o)
	price := r.between(2, 180)
	stock := r.between(0, 40)
	d := g.date()
	if iso {
		rec := fmt.Sprintf("item: %s\nprice: %d euros\nin stock: %d\nadded: %s", name, price, stock, d.iso())
		if r.chance(0.5) {
			rec += fmt.Sprintf("\nThe %s costs %d euros and was added on %s.", name, price, d.iso())
		}
		return rec
	}
	rec := fmt.Sprintf("Item: %s\nPrice: %d euros\nIn stock: %d\nLast sold: %s", name, price, stock, g.longDate(d))
	if r.chance(0.5) {
		rec += fmt.Sprintf("\nThe %s costs %d euros. It was last sold on %s.", name, price, d.us())
	}
	return rec
}

func (g *gen) weatherRecord(iso bool) string {
	r := g.r
	city := pick(r, cities)
	d := g.date()
	temp := r.between(-12, 36)
	skies := []string{"clear", "cloudy", "rainy", "foggy", "windy", "sunny"}
	if temp <= 1 {
		skies = []string{"clear", "cloudy", "snowy", "foggy", "windy"}
	}
	sky := pick(r, skies)
	ds := g.longDate(d)
	if iso {
		ds = d.iso()
	}
	rec := fmt.Sprintf("city: %s\ndate: %s\ntemperature: %d degrees\nsky: %s", city, ds, temp, sky)
	if r.chance(0.5) {
		rec += fmt.Sprintf("\nOn %s it was %d degrees in %s.", ds, temp, city)
	}
	return rec
}

func (g *gen) bookRecord() string {
	r := g.r
	p := g.person()
	t := fmt.Sprintf("The %s %s", capitalize(pick(r, append(append([]string{}, personAdjectives...), colors...))), capitalize(pick(r, animals).sg))
	year := r.between(1900, 2049)
	pages := r.between(40, 600)
	rec := fmt.Sprintf("title: %s\nauthor: %s\nyear: %d\npages: %d", t, p.full(), year, pages)
	if r.chance(0.6) {
		rec += fmt.Sprintf("\n%s wrote %s in %d. The book has %d pages.", p.full(), t, year, pages)
	}
	return rec
}

func (g *gen) inlineRecord() string {
	r := g.r
	p := g.person()
	fields := []string{"Name: " + p.full(), "City: " + pick(r, cities), "Age: " + itoa(r.between(18, 90)), "Job: " + pick(r, jobs)}
	if r.chance(0.5) {
		fields = append(fields, "Color: "+pick(r, colors))
	}
	return strings.Join(fields, " | ")
}

func (g *gen) record(target int) string {
	iso := g.r.chance(0.5)
	return g.grow("", "\n\n", target, func() string {
		switch g.r.intn(10) {
		case 0, 1, 2, 3, 4:
			return g.personRecord(iso)
		case 5, 6:
			return g.itemRecord(iso)
		case 7:
			return g.weatherRecord(iso)
		case 8:
			return g.bookRecord()
		default:
			return g.inlineRecord()
		}
	})
}

// ---- arithmetic ----

func (g *gen) arithmeticSentence() string {
	r := g.r
	switch r.intn(12) {
	case 0:
		a, b := r.between(0, 60), r.between(0, 60)
		return fmt.Sprintf("%d plus %d is %d.", a, b, a+b)
	case 1:
		a, b := r.between(0, 30), r.between(0, 30)
		return fmt.Sprintf("%s plus %s is %s.", capitalize(words(a)), words(b), words(a+b))
	case 2:
		a, b := r.between(0, 99), r.between(0, 99)
		return fmt.Sprintf("%d + %d = %d.", a, b, a+b)
	case 3:
		a := r.between(1, 99)
		b := r.between(0, a)
		if r.chance(0.5) {
			return fmt.Sprintf("%d minus %d is %d.", a, b, a-b)
		}
		return fmt.Sprintf("%s minus %s is %s.", capitalize(words(a)), words(b), words(a-b))
	case 4:
		a, b := r.between(1, 12), r.between(1, 12)
		if r.chance(0.5) {
			return fmt.Sprintf("%d times %d is %d.", a, b, a*b)
		}
		return fmt.Sprintf("%s times %s is %s.", capitalize(words(a)), words(b), words(a*b))
	case 5:
		b, c := r.between(1, 10), r.between(1, 10)
		return fmt.Sprintf("%d divided by %d is %d.", b*c, b, c)
	case 6:
		n := r.between(1, 50)
		if r.chance(0.5) {
			return fmt.Sprintf("Half of %d is %d.", 2*n, n)
		}
		return fmt.Sprintf("Double %d is %d.", n, 2*n)
	case 7:
		n := r.between(0, 999)
		if r.chance(0.5) {
			return fmt.Sprintf("Number: %d\nIn words: %s", n, words(n))
		}
		return fmt.Sprintf("The number %d is written %s.", n, words(n))
	case 8:
		p := g.person()
		f := pick(r, countFoods)
		a, b := r.between(2, 9), r.between(1, 9)
		return fmt.Sprintf("%s had %s. %s bought %d more. Now %s has %s.", p.first, f.count(a), capitalize(p.he()), b, p.he(), f.count(a+b))
	case 9:
		p := g.person()
		age, k := r.between(5, 70), r.between(1, 20)
		return fmt.Sprintf("%s is %d years old. In %s, %s will be %d.", p.first, age, pluralYears(k), p.he(), age+k)
	case 10:
		y := r.between(1900, 2098)
		if r.chance(0.5) {
			return fmt.Sprintf("The year after %d is %d.", y, y+1)
		}
		k := r.between(2, 30)
		return fmt.Sprintf("%d years after %d is %d.", k, y, y+k)
	default:
		a, b := r.between(0, 999), r.between(0, 999)
		if a == b {
			return fmt.Sprintf("%d is equal to %d.", a, b)
		}
		if a < b {
			a, b = b, a
		}
		return fmt.Sprintf("%d is larger than %d.", a, b)
	}
}

func pluralYears(k int) string {
	if k == 1 {
		return "one year"
	}
	return words(k) + " years"
}

func (g *gen) arithmetic(target int) string {
	sep := " "
	if g.r.chance(0.4) {
		sep = "\n"
	}
	return g.grow("", sep, target, g.arithmeticSentence)
}

// ---- calendar ----

func (g *gen) calendarSentence() string {
	r := g.r
	d := g.date()
	switch r.intn(21) {
	case 18, 19, 20:
		// World knowledge the date task builds on: which number each month is.
		m := r.intn(12)
		return fmt.Sprintf(pick(r, []string{
			"%[1]s is the %[2]s month of the year.", "Month %[3]d is %[1]s.", "%[1]s is month number %[3]d.",
			"The %[2]s month is %[1]s.", "In a calendar, month %[4]s is %[1]s.",
		}), monthNames[m], ordinalWord(m+1), m+1, fmt.Sprintf("%02d", m+1))
	case 0:
		return fmt.Sprintf("%s was a %s.", capitalize(pick(r, []string{d.us(), d.us(), d.uk()})), d.weekday())
	case 1:
		m := time.Month(r.between(1, 12))
		if m == time.February {
			return "February has 28 days, or 29 days in a leap year."
		}
		return fmt.Sprintf("%s has %d days.", m, daysIn(2001, m))
	case 2:
		y := r.between(1900, 2099)
		if isLeap(y) {
			return fmt.Sprintf("%d is a leap year, so February %d has 29 days.", y, y)
		}
		return fmt.Sprintf("%d is not a leap year, so February %d has 28 days.", y, y)
	case 3:
		if r.chance(0.5) {
			return fmt.Sprintf("The day after %s is %s.", d.us(), d.add(1).us())
		}
		return fmt.Sprintf("The day before %s is %s.", d.us(), d.add(-1).us())
	case 4:
		return fmt.Sprintf("One week after %s is %s.", d.us(), d.add(7).us())
	case 5:
		i := r.intn(12)
		if r.chance(0.5) {
			return fmt.Sprintf("The month after %s is %s.", monthNames[i], monthNames[(i+1)%12])
		}
		return fmt.Sprintf("%s comes before %s.", monthNames[i], monthNames[(i+1)%12])
	case 6:
		p := g.person()
		return fmt.Sprintf("%s's birthday is on %s.", p.first, g.shortDate(d))
	case 7:
		return fmt.Sprintf("%s is on %s.", capitalize(pick(r, events)), g.longDate(d))
	case 8:
		p := g.person()
		return fmt.Sprintf("In %s %d, %s %s.", d.m, d.y, p.full(), pick(r, activities).with(p.his()).past)
	case 9:
		return fmt.Sprintf("The %s is closed every %s in %s.", strings.TrimPrefix(pick(r, townPlaces), "the "), pick(r, weekdayNames), d.m)
	case 10:
		first := date{d.y, d.m, 1}
		return fmt.Sprintf("The first day of %s %d was a %s.", d.m, d.y, first.weekday())
	case 11:
		e := d.add(r.between(3, 40))
		return fmt.Sprintf("The school holidays start on %s and end on %s.", d.uk(), e.uk())
	case 12:
		e := d.add(r.between(1, 60))
		return fmt.Sprintf("From %s to %s is %s.", d.us(), e.us(), pluralDays(daysBetween(d, e)))
	case 13:
		return fmt.Sprintf("Today is %s, %s. Tomorrow is %s, %s.", d.weekday(), d.us(), d.add(1).weekday(), d.add(1).us())
	case 14:
		p := g.person()
		return fmt.Sprintf("%s moved %s from %s to %s.", p.first, pick(r, events), pick(r, weekdayNames), pick(r, weekdayNames))
	case 15:
		p := g.person()
		return fmt.Sprintf("%s likes %s best of all the months.", p.first, d.m)
	case 16:
		return fmt.Sprintf("The letter was dated %s.", g.longDate(d))
	default:
		return fmt.Sprintf("%s is the %s day of %s.", capitalize(d.ofMonth()), ordinalWord(d.d), d.m)
	}
}

func pluralDays(k int) string {
	if k == 1 {
		return "one day"
	}
	return itoa(k) + " days"
}

// schedule is a week plan: "Monday, March 8: visit my grandmother".
func (g *gen) schedule() string {
	r := g.r
	d := g.date()
	for d.weekday() != "Monday" {
		d = d.add(-1)
	}
	lines := []string{fmt.Sprintf("Plan for the week of %s:", d.us())}
	for i := 0; i < 7; i++ {
		if r.chance(0.35) {
			continue
		}
		e := d.add(i)
		lines = append(lines, fmt.Sprintf("%s, %s: %s", e.weekday(), e.monthDay(), pick(r, activities).with("my").base))
	}
	return strings.Join(lines, "\n")
}

func (g *gen) calendar(target int) string {
	if g.r.chance(0.25) {
		return g.grow(g.schedule(), "\n", target, g.calendarSentence)
	}
	sep := " "
	if g.r.chance(0.3) {
		sep = "\n"
	}
	return g.grow("", sep, target, g.calendarSentence)
}

// ---- ISO-dated logs and tables (never a month name) ----

// logMessage returns a log level and a message that suits it.
func (g *gen) logMessage() (string, string) {
	r := g.r
	switch r.intn(10) {
	case 0:
		return "INFO", fmt.Sprintf("started on port %d", r.between(1024, 9999))
	case 1:
		return pick(r, []string{"INFO", "DEBUG"}), fmt.Sprintf("request %d took %d ms", r.between(1000, 99999), r.between(1, 900))
	case 2:
		return "WARN", fmt.Sprintf("disk %d is %d%% full", r.between(0, 7), r.between(80, 99))
	case 3:
		p := g.person()
		return "INFO", fmt.Sprintf("user %s logged in", strings.ToLower(p.first+"."+p.last))
	case 4:
		return "INFO", fmt.Sprintf("job %d finished in %d s", r.between(1, 500), r.between(1, 300))
	case 5:
		return "WARN", fmt.Sprintf("retrying in %d s", r.between(1, 60))
	case 6:
		return "ERROR", pick(r, []string{"connection lost", "request timed out", "file not found", "permission denied"})
	case 7:
		return "DEBUG", "cache cleared"
	case 8:
		return "INFO", fmt.Sprintf("saved %d rows", r.between(1, 5000))
	default:
		return "DEBUG", fmt.Sprintf("queue has %d items", r.between(0, 400))
	}
}

func (g *gen) logLines(target int) string {
	r := g.r
	d := g.date()
	sec := r.intn(86400)
	style := r.intn(3)
	return g.grow("", "\n", target, func() string {
		sec += r.between(1, 900)
		if sec >= 86400 {
			sec -= 86400
			d = d.add(1)
		}
		ts := fmt.Sprintf("%02d:%02d:%02d", sec/3600, sec/60%60, sec%60)
		level, msg := g.logMessage()
		svc := pick(r, services)
		switch style {
		case 0:
			return fmt.Sprintf("%s %s %s %s: %s", d.iso(), ts, level, svc, msg)
		case 1:
			return fmt.Sprintf("[%s %s] %s %s", d.iso(), ts, level, msg)
		default:
			return fmt.Sprintf("%sT%sZ %s %s: %s", d.iso(), ts, svc, strings.ToLower(level), msg)
		}
	})
}

func (g *gen) isoTable(target int) string {
	r := g.r
	d := g.date()
	switch r.intn(5) {
	case 0:
		n := r.between(1000, 9000)
		return g.grow("order | date | items | status", "\n", target, func() string {
			n += r.between(1, 30)
			d = d.add(r.between(0, 3))
			return fmt.Sprintf("%d | %s | %s | %s", n, d.iso(), pick(r, countFoods).count(r.between(1, 12)), pick(r, []string{"shipped", "paid", "open", "returned", "packed"}))
		})
	case 1:
		major, minor, patch := r.between(0, 5), r.between(0, 20), 0
		return g.grow("Changelog", "\n", target, func() string {
			patch++
			if r.chance(0.3) {
				minor, patch = minor+1, 0
			}
			d = d.add(r.between(2, 40))
			return fmt.Sprintf("version %d.%d.%d (%s): %s the %s %s", major, minor, patch, d.iso(),
				pick(r, []string{"fixed a bug in", "made faster", "cleaned up", "added tests for", "rewrote"}),
				pick(r, services), pick(r, []string{"module", "service", "client", "parser"}))
		})
	case 2:
		return g.grow("Files in the folder:", "\n", target, func() string {
			d = d.add(r.between(1, 9))
			return fmt.Sprintf("%s-%s.%s  %d KB", pick(r, []string{"report", "backup", "photo", "notes", "invoice", "scan"}), d.iso(), pick(r, []string{"txt", "tar", "jpg", "csv", "pdf"}), r.between(1, 9000))
		})
	case 3:
		place := pick(r, cities)
		temp, hour := r.between(-10, 30), r.between(0, 23)
		return g.grow("Sensor readings from "+place+":", "\n", target, func() string {
			d = d.add(1)
			temp += r.between(-3, 3)
			return fmt.Sprintf("%s %02d:00 temperature %d C, humidity %d%%", d.iso(), hour, temp, r.between(20, 99))
		})
	default:
		return g.grow("", " ", target, func() string {
			d = d.add(r.between(1, 20))
			switch r.intn(4) {
			case 0:
				return fmt.Sprintf("The backup from %s is stored in folder %d.", d.iso(), r.between(1, 40))
			case 1:
				return fmt.Sprintf("Invoice %d was issued on %s and is due on %s.", r.between(100, 999), d.iso(), d.add(30).iso())
			case 2:
				return fmt.Sprintf("The log shows that job %d ran on %s at %s.", r.between(1, 99), d.iso(), g.clock())
			default:
				p := g.person()
				return fmt.Sprintf("%s signed the form on %s.", p.full(), d.iso())
			}
		})
	}
}

func (g *gen) logs(target int) string {
	if g.r.chance(0.5) {
		return g.logLines(target)
	}
	return g.isoTable(target)
}

// ---- verbatim repetition ----

func (g *gen) copyUnit(iso bool) string {
	r := g.r
	switch r.intn(11) {
	case 0:
		w := g.madeUpWord()
		return fmt.Sprintf("The secret word is %s. Please remember it. The secret word is %s.", w, w)
	case 1:
		c := g.code()
		return fmt.Sprintf("Your code is %s. Enter %s to open the door.", c, c)
	case 2:
		ps := g.people(2)
		return fmt.Sprintf("Message for %s: %s called at %s. Please call %s back on %s.", ps[0].first, ps[1].full(), g.clock(), ps[1].full(), pick(r, weekdayNames))
	case 3:
		var ws []string
		for i := r.between(4, 8); i > 0; i-- {
			switch r.intn(4) {
			case 0:
				ws = append(ws, g.madeUpWord())
			case 1:
				ws = append(ws, pick(r, objects).sg)
			case 2:
				ws = append(ws, pick(r, colors))
			default:
				ws = append(ws, pick(r, animals).sg)
			}
		}
		line := strings.Join(ws, " ")
		return fmt.Sprintf("Copy this line: %s\n%s", line, line)
	case 4:
		p := g.person()
		return fmt.Sprintf("%s said the name twice: %s, %s.", g.person().first, p.full(), p.full())
	case 5:
		var items []string
		for _, f := range pickN(r, countFoods, r.between(3, 5)) {
			items = append(items, f.pl)
		}
		l := join(items)
		return fmt.Sprintf("First list: %s. The second list is the same: %s.", l, l)
	case 6:
		d := g.date()
		if iso {
			ds := d.iso()
			return fmt.Sprintf("Ticket valid from %s. Valid from: %s.", ds, ds)
		}
		ds := pick(r, []string{d.us(), d.us(), d.uk()})
		return fmt.Sprintf("The trip starts on %s. Write it down: %s.", ds, ds)
	case 7:
		p := g.person()
		if r.chance(0.5) {
			return fmt.Sprintf("Name: %s\nSorted as: %s, %s", p.full(), p.last, p.first)
		}
		return fmt.Sprintf("%s is listed as %s, %s.", p.full(), p.last, p.first)
	case 8:
		w := pick(r, append([]string{g.madeUpWord()}, pick(r, objects).sg, pick(r, animals).sg, pick(r, cities), pick(r, colors)))
		return fmt.Sprintf("The word %s is spelled %s.", w, strings.Join(strings.Split(w, ""), "-"))
	case 9:
		ps := g.people(3)
		a := pick(r, activities).with(ps[0].his())
		return fmt.Sprintf("%s wrote: %s will %s. %s wrote the same: %s will %s.", ps[1].first, ps[0].first, a.base, ps[2].first, ps[0].first, a.base)
	default:
		c := g.code()
		o := pick(r, objects)
		return fmt.Sprintf("Box %s holds %s. Box %s is on the %s shelf.", c, o.countWords(r.between(2, 9)), c, pick(r, []string{"top", "middle", "bottom"}))
	}
}

func (g *gen) copying(target int) string {
	iso := g.r.chance(0.3)
	return g.grow("", "\n", target, func() string { return g.copyUnit(iso) })
}

// ---- echo: exact repetition of strings nothing else predicts ----

// echo passages introduce strings no model can guess (codes, digit runs,
// made-up words) and repeat them verbatim later in the passage, after
// filler of varying length. The only way to predict the repeat is to find
// the earlier occurrence and copy it, which is what trains a model's
// copying ("induction") heads; the date task later relies on them.
func (g *gen) echo(target int) string {
	r := g.r
	var held []string // strings introduced so far, to repeat later
	novel := func() string {
		switch r.intn(5) {
		case 0:
			return g.code()
		case 1:
			n := r.between(2, 8)
			b := make([]byte, n)
			for i := range b {
				b[i] = byte('0' + r.intn(10))
			}
			return string(b)
		case 2:
			return g.madeUpWord()
		case 3:
			return fmt.Sprintf("%s %s", g.madeUpWord(), g.madeUpWord())
		default:
			return fmt.Sprintf("%d-%02d-%d", r.between(10, 99), r.intn(100), r.between(100, 999))
		}
	}
	unit := func() string {
		if len(held) > 0 && r.chance(0.55) {
			x := held[r.intn(len(held))]
			return fmt.Sprintf(pick(r, []string{
				"Again: %s.", "I repeat, %s.", "Once more: %s.", "It was %s.", "The answer is still %s.",
				"Remember %s.", "Check: %s.", "%s, as noted above.", "Read it back: %s.",
			}), x)
		}
		x := novel()
		held = append(held, x)
		return fmt.Sprintf(pick(r, []string{
			"The code is %s.", "Write down %s.", "Her number is %s.", "The password is %s.", "Label: %s.",
			"The word of the day is %s.", "Remember this: %s.", "Ticket %s was scanned.", "He typed %s.",
			"The key reads %s.",
		}), x)
	}
	filler := func() string {
		if r.chance(0.5) {
			return ""
		}
		p := g.person()
		return " " + fmt.Sprintf("%s %s.", p.first, pick(r, activities).with(p.his()).past)
	}
	return g.grow("", " ", target, func() string { return unit() + filler() })
}

// ---- the corpus ----

type kind struct {
	name   string
	weight int
	fn     func(g *gen, target int) string
}

var kinds = []kind{
	{"narrative", 20, (*gen).narrative},
	{"dialogue", 12, (*gen).dialogue},
	{"list", 9, (*gen).list},
	{"record", 13, (*gen).record},
	{"arithmetic", 10, (*gen).arithmetic},
	{"calendar", 16, (*gen).calendar},
	{"log", 10, (*gen).logs},
	{"copy", 10, (*gen).copying},
	{"echo", 14, (*gen).echo},
}

var (
	isoRE   = regexp.MustCompile(`\d{4}-\d{2}-\d{2}`)
	monthRE = regexp.MustCompile(`\b(` + strings.Join(monthNames, "|") + `)\b`)
	slashRE = regexp.MustCompile(`\d+/\d+/\d+`)
)

// checkRow enforces the corpus rules: length bounds, printable ASCII, no
// slash dates, and no row with both an ISO date and a month name. The last
// is stricter than "no ISO date next to its own long form": a row that held
// 2021-03-07 and any March at all could still teach the month mapping.
func checkRow(s string) error {
	if len(s) < minRow || len(s) > maxRow {
		return fmt.Errorf("row of %d bytes, want %d..%d: %q", len(s), minRow, maxRow, s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '\n' && (c < ' ' || c > '~') {
			return fmt.Errorf("byte %#x in row %q", c, s)
		}
	}
	if slashRE.MatchString(s) {
		return fmt.Errorf("slash date in row %q", s)
	}
	if isoRE.MatchString(s) && monthRE.MatchString(s) {
		return fmt.Errorf("ISO date and month name in one row: %q", s)
	}
	return nil
}

type corpusStats struct {
	rows, textBytes, fileBytes int
	minLen, maxLen             int
	perKind                    map[string]int
}

// generateCorpus returns the JSONL bytes of a corpus of at least
// targetBytes bytes (the file size, newlines included).
func generateCorpus(seed uint64, targetBytes int) ([]byte, corpusStats, error) {
	g := &gen{r: newRNG(seed, "corpus")}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	st := corpusStats{minLen: maxRow, perKind: map[string]int{}}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for buf.Len() < targetBytes {
		x := g.r.intn(total)
		var k kind
		for _, k = range kinds {
			if x < k.weight {
				break
			}
			x -= k.weight
		}
		var s string
		for tries := 0; ; tries++ {
			if tries == 100 {
				return nil, st, fmt.Errorf("kind %s: no row of %d..%d bytes in 100 tries", k.name, minRow, maxRow)
			}
			s = k.fn(g, g.r.between(minRow+40, maxRow-40))
			if len(s) >= minRow && len(s) <= maxRow {
				break
			}
		}
		if err := checkRow(s); err != nil {
			return nil, st, fmt.Errorf("kind %s: %v", k.name, err)
		}
		if err := enc.Encode(struct {
			Text string `json:"text"`
		}{s}); err != nil {
			return nil, st, err
		}
		st.rows++
		st.textBytes += len(s)
		st.minLen = min(st.minLen, len(s))
		st.maxLen = max(st.maxLen, len(s))
		st.perKind[k.name]++
	}
	st.fileBytes = buf.Len()
	return buf.Bytes(), st, nil
}
