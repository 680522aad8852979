//go:build !race

package controllers

const raceEnabled = false
