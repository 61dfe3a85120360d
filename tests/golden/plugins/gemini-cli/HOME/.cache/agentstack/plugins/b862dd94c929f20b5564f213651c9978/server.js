console.log('docs')
