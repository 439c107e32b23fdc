package main

import "strings"

var smallWords = []string{
	"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
	"ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
	"seventeen", "eighteen", "nineteen",
}

var tensWords = []string{"", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"}

// words spells 0 <= n <= 9999 in English: 47 is "forty-seven", 305 is
// "three hundred and five", 1200 is "one thousand two hundred".
func words(n int) string {
	if n < 0 || n > 9999 {
		panic("words: out of range")
	}
	if n < 20 {
		return smallWords[n]
	}
	if n < 100 {
		if n%10 == 0 {
			return tensWords[n/10]
		}
		return tensWords[n/10] + "-" + smallWords[n%10]
	}
	if n < 1000 {
		s := smallWords[n/100] + " hundred"
		if n%100 != 0 {
			s += " and " + words(n%100)
		}
		return s
	}
	s := smallWords[n/1000] + " thousand"
	switch r := n % 1000; {
	case r == 0:
	case r < 100:
		s += " and " + words(r)
	default:
		s += " " + words(r)
	}
	return s
}

var ordinalWordsList = []string{
	"", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
	"tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth",
	"seventeenth", "eighteenth", "nineteenth", "twentieth",
}

// ordinalWord spells 1 <= n <= 99 as an ordinal: "seventh", "twenty-first".
func ordinalWord(n int) string {
	if n <= 20 {
		return ordinalWordsList[n]
	}
	if n%10 == 0 {
		return strings.TrimSuffix(tensWords[n/10], "y") + "ieth"
	}
	return tensWords[n/10] + "-" + ordinalWordsList[n%10]
}

// capitalize upper-cases the first byte of an ASCII string.
func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// article returns "a" or "an" for the word that follows it. The word lists
// avoid the words whose sound disagrees with their first letter.
func article(word string) string {
	if word == "" {
		return "a"
	}
	switch word[0] {
	case 'a', 'e', 'i', 'o', 'u', 'A', 'E', 'I', 'O', 'U':
		return "an"
	}
	return "a"
}

// withArticle is "an old key".
func withArticle(phrase string) string { return article(phrase) + " " + phrase }

// join lists items in English: "a", "a and b", "a, b, and c".
func join(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	case 2:
		return items[0] + " and " + items[1]
	}
	return strings.Join(items[:len(items)-1], ", ") + ", and " + items[len(items)-1]
}
