package main

import (
	"fmt"
	"time"
)

// Task date range, inclusive.
const (
	minYear = 1950
	maxYear = 2049
)

// date is a calendar day.
type date struct {
	y int
	m time.Month
	d int
}

func (d date) time() time.Time { return time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC) }

func fromTime(t time.Time) date { return date{t.Year(), t.Month(), t.Day()} }

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(y int, m time.Month) int {
	switch m {
	case time.February:
		if isLeap(y) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}

// valid reports whether d is a real calendar day.
func (d date) valid() bool {
	return d.m >= time.January && d.m <= time.December && d.d >= 1 && d.d <= daysIn(d.y, d.m)
}

// iso is "2021-03-07".
func (d date) iso() string { return fmt.Sprintf("%04d-%02d-%02d", d.y, int(d.m), d.d) }

// us is the long US form "March 7, 2021", the task's completion.
func (d date) us() string { return fmt.Sprintf("%s %d, %d", d.m, d.d, d.y) }

// uk is "7 March 2021".
func (d date) uk() string { return fmt.Sprintf("%d %s %d", d.d, d.m, d.y) }

// ofMonth is "the 7th of March".
func (d date) ofMonth() string { return fmt.Sprintf("the %s of %s", ordinal(d.d), d.m) }

// monthDay is "March 7".
func (d date) monthDay() string { return fmt.Sprintf("%s %d", d.m, d.d) }

// monthOrd is "March 7th".
func (d date) monthOrd() string { return fmt.Sprintf("%s %s", d.m, ordinal(d.d)) }

func (d date) weekday() string { return d.time().Weekday().String() }

func (d date) add(days int) date { return fromTime(d.time().AddDate(0, 0, days)) }

// daysBetween is the number of days from a to b.
func daysBetween(a, b date) int { return int(b.time().Sub(a.time()).Hours() / 24) }

// ordinal is "1st", "2nd", "3rd", "4th", "11th", "21st", ...
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

var monthNames = func() []string {
	s := make([]string, 12)
	for i := range s {
		s[i] = time.Month(i + 1).String()
	}
	return s
}()

var weekdayNames = []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}

// allDates returns every day from minYear-01-01 to maxYear-12-31 grouped by
// month: out[0] holds the Januaries, in date order.
func allDates() [12][]date {
	var out [12][]date
	for y := minYear; y <= maxYear; y++ {
		for m := time.January; m <= time.December; m++ {
			for d := 1; d <= daysIn(y, m); d++ {
				out[m-1] = append(out[m-1], date{y, m, d})
			}
		}
	}
	return out
}
